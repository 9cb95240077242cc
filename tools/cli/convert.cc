// `fxfuse convert IN -o OUT`: converts between graph formats, chosen by extension.
// Readable: .pt2, .json, .pb, .fxg, FX text. Writable: .fxg, .pb, .json.
#include <string>

#include "tools/cli/commands.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/verifier.h"

namespace fxfuse::cli {

void registerConvert(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("convert", "Convert a graph between formats (by extension)");
  static std::string in, out;
  static bool locations = false;
  cmd->add_option("input", in, "input graph")->required();
  cmd->add_option("-o,--output", out, "output file: .fxg, .pb or .json")->required();
  cmd->add_flag("--locations", locations, "print source locations in .fxg output");
  cmd->callback([&exit_code] {
    auto m = ir::loadModule(in);
    ir::verifyOrThrow(*m, in);
    if (out.size() > 4 && out.substr(out.size() - 4) == ".fxg") {
      ir::FxgPrintOptions opts;
      opts.locations = locations;
      ir::writeFileAtomic(out, ir::printFxg(*m, opts));
    } else {
      ir::saveModule(*m, out);
    }
    exit_code = 0;
  });
}

}  // namespace fxfuse::cli
