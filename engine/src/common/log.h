// Logging to stderr (never stdout: stdout is the serve protocol). Lines carry elapsed seconds and a tag.
#pragma once
#include <string>

namespace strata {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };
void set_log_level(LogLevel level);
void log_line(LogLevel level, const char* tag, const std::string& msg);

inline void log_info(const char* tag, const std::string& msg) { log_line(LogLevel::info, tag, msg); }
inline void log_warn(const char* tag, const std::string& msg) { log_line(LogLevel::warn, tag, msg); }
inline void log_debug(const char* tag, const std::string& msg) { log_line(LogLevel::debug, tag, msg); }

}  // namespace strata
