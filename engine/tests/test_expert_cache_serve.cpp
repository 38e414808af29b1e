// The serve loop's expert-cache reporting (ServeHooks): INFO carries the backend's lines, and each DONE carries the
// hits and look-ups of its own request (the running counters at its end minus at its start), not the totals.
// The model is a stand-in whose every appended token "looks up" 10 experts and hits 7 (fewer while reading prompts).
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "serve/serve_loop.h"
#include "serve_stand_in.h"

namespace {

struct Counters {
    int64_t hits = 0, lookups = 0;
};

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream s(text);
    for (std::string l; std::getline(s, l);) v.push_back(l);
    return v;
}

}  // namespace

int main() {
    Counters c;
    c.hits = 1000;   // counters from earlier work (e.g. start-up) are not any request's
    c.lookups = 2000;
    test::ServeStandIn gen([&c](int64_t n) {
        c.lookups += 10 * n;
        c.hits += n > 1 ? 3 * n : 7;   // prompts hit less than decode steps
    });
    strata::ServeHooks hooks;
    hooks.info = {{"expert_cache_slots", "4100"}, {"cpu_workers", "6"}};
    hooks.expert_cache_counts = [&c] { return std::make_pair(c.hits, c.lookups); };
    // Request 1: 4 prompt tokens, 3 new (2 decode appends; the session is then 1,2,3,4,5,5). Request 2 extends
    // the session: 2 new prompt tokens (6 reused), 2 new tokens (1 decode append).
    std::istringstream in("GEN 3 1,2,3,4\nGEN 2 1,2,3,4,5,5,9,9\n");   // end of input: both are answered
    std::ostringstream out;
    CHECK(strata::serve_main(gen, in, out, hooks) == 0);
    const std::vector<std::string> lines = lines_of(out.str());
    bool slots = false, workers = false;
    std::vector<std::string> done;
    for (const std::string& l : lines) {
        slots |= l == "INFO expert_cache_slots=4100";
        workers |= l == "INFO cpu_workers=6";
        if (l.rfind("DONE ", 0) == 0) done.push_back(l);
    }
    CHECK(slots && workers);
    CHECK_MSG(done.size() == 2, "%zu DONE lines in:\n%s", done.size(), out.str().c_str());
    auto last_two = [](const std::string& l) {
        std::istringstream s(l);
        std::vector<std::string> f;
        for (std::string w; s >> w;) f.push_back(w);
        return f.size() >= 2 ? f[f.size() - 2] + " " + f.back() : std::string();
    };
    if (done.size() == 2) {
        // 1: prompt 4 → 12 hits / 40 look-ups; 2 decode steps → 14 / 20.
        CHECK_MSG(last_two(done[0]) == "26 60", "%s", done[0].c_str());
        // 2: prompt rest 2 → 6 / 20; 1 decode step → 7 / 10.
        CHECK_MSG(last_two(done[1]) == "13 30", "%s", done[1].c_str());
    }
    return test::exit_code();
}
