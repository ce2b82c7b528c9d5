// Which sanitizer this translation unit is built with, for the few places
// that must behave differently under one (GCC says so with __SANITIZE_*__,
// Clang with __has_feature). RGPU_ASAN and RGPU_TSAN are 0 or 1.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define RGPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RGPU_ASAN 1
#endif
#endif
#ifndef RGPU_ASAN
#define RGPU_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define RGPU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RGPU_TSAN 1
#endif
#endif
#ifndef RGPU_TSAN
#define RGPU_TSAN 0
#endif
