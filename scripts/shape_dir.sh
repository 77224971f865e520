# Sourced by the GPU-machine scripts (run from the repository root): a model folder for a shape
# of testdata/configs, for `--load-format dummy` runs: its config.json and the tokenizer of its
# family, made once under /tmp/shapes/.
#   dir=$(shape_dir qwen3-0.6b)
shape_dir() {
  local shape=$1 dir=/tmp/shapes/$1 tok=qwen3
  case $shape in
    llama-3*) tok=llama3 ;;
    tinyllama* | llama-2*) tok=llama2 ;;
  esac
  if [[ ! -f $dir/config.json ]]; then
    mkdir -p "$dir"
    cp "testdata/configs/$shape.json" "$dir/config.json"
    cp testdata/tokenizers/$tok/tokenizer.json testdata/tokenizers/$tok/tokenizer_config.json "$dir/"
  fi
  echo "$dir"
}
