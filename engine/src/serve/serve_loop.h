// `strata --serve`: the request loop over a loaded model, speaking protocol.md on in/out (stdin/stdout).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "generate/text_generator.h"
#include "generate/vocabulary.h"

namespace strata {

// What the serve loop may learn from the backend: extra INFO lines, and the expert cache's running hit and
// look-up counters (DONE reports each request's share).
struct ServeHooks {
    bool vision = false;   // --vision: GENI requests are served (INFO vision=1)
    std::vector<std::pair<std::string, std::string>> info;
    std::function<std::pair<int64_t, int64_t>()> expert_cache_counts;   // (hits, look-ups) since start
    // Further running counters (name, value since start); DONE carries name=<the request's share> for each.
    std::function<std::vector<std::pair<std::string, double>>()> done_counters;
    Vocabulary vocabulary;   // the tokens' bytes, for grammar requests (empty: the model file names none)
};

// Writes INFO lines and READY, then serves GEN/GENI/STOP/QUIT lines from `in` until QUIT or end of input,
// one flushed line per event on `out`. Returns the process exit code (0 after QUIT / end of input, 1 if `out`
// broke). Logs go to stderr only.
int serve_main(TextGenerator& gen, std::istream& in, std::ostream& out, const ServeHooks& hooks = {});

}  // namespace strata
