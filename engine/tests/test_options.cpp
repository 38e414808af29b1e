// Command-line options (cli/options.h): typed getters and the errors that name the flag, including the real-number
// getter of --gpu-miss-share.
#include <string>
#include <vector>

#include "check.h"
#include "cli/options.h"
#include "common/error.h"

using namespace strata;

namespace {

Options parse(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return Options((int)argv.size(), argv.data(), 0, {"--n", "--share"}, {"--flag"});
}

template <class Fn>
std::string error_of(Fn&& fn) {
    try { fn(); } catch (const Error& e) { return e.what(); }
    return "";
}

}  // namespace

int main() {
    const Options o = parse({"--n", "12", "--share", "0.75", "--flag"});
    CHECK(o.integer("--n", 0, 0, 100) == 12);
    CHECK(o.real("--share", 0, 0, 1) == 0.75);
    CHECK(o.real("--missing", 0.25, 0, 1) == 0.25);
    CHECK(o.has("--flag"));
    CHECK(parse({"--share", "1"}).real("--share", 0, 0, 1) == 1.0);
    CHECK(parse({"--share", "0"}).real("--share", 0.5, 0, 1) == 0.0);
    CHECK(error_of([] { parse({"--share", "1.5"}).real("--share", 0, 0, 1); }).find("between 0 and 1") != std::string::npos);
    CHECK(error_of([] { parse({"--share", "half"}).real("--share", 0, 0, 1); }).find("needs a number, got 'half'") !=
          std::string::npos);
    CHECK(error_of([] { parse({"--share", "0.5x"}).real("--share", 0, 0, 1); }).find("--share") != std::string::npos);
    CHECK(error_of([] { parse({"--share", "nan"}).real("--share", 0, 0, 1); }).find("needs a number") != std::string::npos);
    CHECK(error_of([] { parse({"--n", "7.5"}).integer("--n", 0, 0, 10); }).find("needs an integer") != std::string::npos);
    CHECK(!error_of([] { parse({"--bogus", "1"}); }).empty());
    return test::exit_code();
}
