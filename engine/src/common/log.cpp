#include "common/log.h"
#include <chrono>
#include <cstdio>
#include <mutex>

namespace strata {

static LogLevel g_level = LogLevel::info;
static const auto g_start = std::chrono::steady_clock::now();
static std::mutex g_mutex;

void set_log_level(LogLevel level) { g_level = level; }

void log_line(LogLevel level, const char* tag, const std::string& msg) {
    if (level < g_level) return;
    static const char* names[] = {"debug", "info", "warn", "error"};
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "[%8.3f] %-5s %s: %s\n", t, names[(int)level], tag, msg.c_str());
    std::fflush(stderr);
}

}  // namespace strata
