// `fxfuse convert IN -o OUT`: converts between graph formats, chosen by extension.
// Readable: .pt2, .json, .pb, .fxg, FX text. Writable: .fxg, .pb, .json, .pt2.
#include <string>

#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/pt2_writer.h"
#include "ir/verifier.h"

namespace fxfuse::cli {

void registerConvert(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("convert", "Convert a graph between formats (by extension)");
  static std::string in, out;
  static bool locations = false;
  cmd->add_option("input", in, "input graph")->required();
  cmd->add_option("-o,--output", out, "output file: .fxg, .pb, .json or .pt2")->required();
  cmd->add_flag("--locations", locations, "print source locations in .fxg output");
  cmd->callback([&exit_code] {
    progress::stage("reading " + in);
    auto m = ir::loadModule(in);
    ir::verifyOrThrow(*m, in);
    if (out.size() > 4 && out.substr(out.size() - 4) == ".fxg") {
      ir::FxgPrintOptions opts;
      opts.locations = locations;
      ir::writeOutputFile(out, ir::printFxg(*m, opts));
    } else if (out.size() > 4 && out.substr(out.size() - 4) == ".pt2") {
      ir::savePt2Archive(*m, out);
    } else {
      ir::saveModule(*m, out);
    }
    exit_code = 0;
  });
}

}  // namespace fxfuse::cli
