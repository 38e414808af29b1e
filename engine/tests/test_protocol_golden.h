// Reader for the golden transcripts in tests/protocol/*.txt (format: protocol.md §8), shared by the protocol tests.
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace golden {

struct Step {
    std::string send;                  // a line for the engine
    std::vector<std::string> expect;   // the patterns of the lines it must answer with
};

struct Transcript {
    std::string name;
    std::vector<Step> steps;
};

inline std::filesystem::path dir() {
    return std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "tests" / "protocol";
}

inline std::vector<Transcript> load_all() {
    std::vector<Transcript> out;
    std::vector<std::filesystem::path> files;
    for (auto& entry : std::filesystem::directory_iterator(dir()))
        if (entry.path().extension() == ".txt") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (auto& path : files) {
        Transcript t;
        t.name = path.filename().string();
        std::ifstream in(path);
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("> ", 0) == 0) t.steps.push_back({line.substr(2), {}});
            else if (line.rfind("< ", 0) == 0 && !t.steps.empty()) t.steps.back().expect.push_back(line.substr(2));
        }
        out.push_back(std::move(t));
    }
    return out;
}

inline std::vector<std::string> fields(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(' ', i);
        if (j == std::string::npos) j = s.size();
        out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

// Whether `pattern` ends with the repetition marker " ..."; `base` gets the pattern without it.
inline bool repeated(const std::string& pattern, std::string& base) {
    if (pattern.size() > 4 && pattern.compare(pattern.size() - 4, 4, " ...") == 0) {
        base = pattern.substr(0, pattern.size() - 4);
        return true;
    }
    base = pattern;
    return false;
}

// `*` matches any one field; every other field must be equal. DONE's optional key=value counters after its ten
// fields are not matched (protocol.md §8).
inline bool matches(const std::string& pattern, const std::string& line) {
    std::vector<std::string> p = fields(pattern), l = fields(line);
    if (!l.empty() && l[0] == "DONE")
        while (l.size() > 11 && l.back().find('=') != std::string::npos) l.pop_back();
    if (p.size() != l.size()) return false;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] != "*" && p[i] != l[i]) return false;
    return true;
}

}  // namespace golden
