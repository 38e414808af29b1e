// The serve loop's optional DONE counters (ServeHooks::done_counters, protocol.md §4): each DONE ends with
// key=value for every counter, the request's share (running value at its end minus at its start), `_ms` keys with
// one decimal; without the hook DONE keeps its ten fields. The model is a stand-in whose every appended token adds
// 1.5 "CPU ms" and 4096 "bytes".
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "serve/serve_loop.h"
#include "serve_stand_in.h"

namespace {

struct Counters {
    double cpu_ms = 100;        // work before the first request is no request's
    double cpu_bytes = 1 << 20;
};

std::vector<std::string> done_lines(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream s(text);
    for (std::string l; std::getline(s, l);)
        if (l.rfind("DONE ", 0) == 0) v.push_back(l);
    return v;
}

std::string serve(Counters& c, bool with_hook) {
    test::ServeStandIn gen([&c](int64_t n) {
        c.cpu_ms += 1.5 * (double)n;
        c.cpu_bytes += 4096.0 * (double)n;
    });
    strata::ServeHooks hooks;
    if (with_hook)
        hooks.done_counters = [&c] {
            return std::vector<std::pair<std::string, double>>{{"cpu_ms", c.cpu_ms}, {"cpu_bytes", c.cpu_bytes}};
        };
    std::istringstream in("GEN 3 1,2,3,4\nGEN 2 1,2,3,4,5,5,9,9\n");
    std::ostringstream out;
    CHECK(strata::serve_main(gen, in, out, hooks) == 0);
    return out.str();
}

}  // namespace

int main() {
    Counters c;
    const std::vector<std::string> done = done_lines(serve(c, true));
    CHECK_MSG(done.size() == 2, "%zu DONE lines", done.size());
    if (done.size() == 2) {
        // 1: 4 prompt tokens + 2 decode appends = 6 tokens. 2: 2 new prompt tokens + 1 decode append = 3.
        const std::string end1 = " cpu_ms=9.0 cpu_bytes=24576", end2 = " cpu_ms=4.5 cpu_bytes=12288";
        CHECK_MSG(done[0].size() > end1.size() && done[0].compare(done[0].size() - end1.size(), end1.size(), end1) == 0,
                  "%s", done[0].c_str());
        CHECK_MSG(done[1].size() > end2.size() && done[1].compare(done[1].size() - end2.size(), end2.size(), end2) == 0,
                  "%s", done[1].c_str());
    }
    Counters plain;
    for (const std::string& l : done_lines(serve(plain, false))) {
        std::istringstream s(l);
        int fields = 0;
        for (std::string w; s >> w;) ++fields;
        CHECK_MSG(fields == 11, "without the hook DONE has ten fields after the word: %s", l.c_str());
    }
    return test::exit_code();
}
