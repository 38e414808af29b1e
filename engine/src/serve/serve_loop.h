// `strata --serve`: the request loop over a loaded model, speaking protocol.md on in/out (stdin/stdout).
#pragma once
#include <iosfwd>

#include "generate/text_generator.h"

namespace strata {

// Writes INFO lines and READY, then serves GEN/GENI/STOP/QUIT lines from `in` until QUIT or end of input,
// one flushed line per event on `out`. Returns the process exit code (0 after QUIT / end of input, 1 if `out`
// broke). Logs go to stderr only.
int serve_main(TextGenerator& gen, std::istream& in, std::ostream& out);

}  // namespace strata
