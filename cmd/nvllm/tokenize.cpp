#include "cmd/nvllm/commands.h"
#include "core/error.h"

namespace nvllm {

Command make_tokenize_command() {
  Command c;
  c.add_fn = [](CLI::App& app) { return app.add_subcommand("tokenize", "(not built yet)"); };
  c.run = []() -> int { fail("'nvllm tokenize' is not built yet"); };
  return c;
}

}  // namespace nvllm
