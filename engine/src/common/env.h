// On/off switches read from the environment (the A/B switches of docs/engine-environment.md).
#pragma once
#include <cstdlib>
#include <cstring>

namespace strata {

// The variable `name` as a switch: "1" on, "0" off, anything else (or unset) `fallback`.
inline bool env_switch(const char* name, bool fallback) {
    const char* v = std::getenv(name);
    if (v && std::strcmp(v, "1") == 0) return true;
    if (v && std::strcmp(v, "0") == 0) return false;
    return fallback;
}

}  // namespace strata
