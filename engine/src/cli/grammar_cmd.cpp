// `strata grammar-check GRAMMAR_FILE TEXT_FILE…`: parses a grammar (docs/grammar.md) and says of each text whether it is
// a whole sentence (complete), can still become one (prefix) or where it breaks (rejected at byte N).
// Exit status: 0 when the grammar parsed, 2 when it did not or a file cannot be read.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/options.h"
#include "common/error.h"
#include "generate/grammar.h"

namespace strata {

namespace {
std::string read_file(const char* path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open ", path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
}  // namespace

int grammar_check_command(int argc, char** argv) {
    if (argc < 3) {
        std::fputs("usage: strata grammar-check GRAMMAR_FILE TEXT_FILE...\n", stderr);
        return 2;
    }
    std::shared_ptr<const Grammar> grammar;
    try {
        grammar = Grammar::parse(read_file(argv[2]));
    } catch (const Error& e) {
        std::fprintf(stderr, "strata: %s\n", e.what());
        return 2;
    }
    for (int i = 3; i < argc; ++i) {
        std::string text;
        try {
            text = read_file(argv[i]);
        } catch (const Error& e) {
            std::fprintf(stderr, "strata: %s\n", e.what());
            return 2;
        }
        GrammarMatcher m(grammar);
        size_t at = 0;
        while (at < text.size() && m.accept(std::string_view(text).substr(at, 1))) ++at;
        if (at < text.size()) std::printf("%s: rejected at byte %zu\n", argv[i], at);
        else std::printf("%s: %s\n", argv[i], m.complete() ? "complete" : "prefix");
    }
    return 0;
}

}  // namespace strata
