// sluice/export.h: which symbols the shared library exports. The library is
// built with hidden visibility; every declaration between SLUICE_API_BEGIN
// and SLUICE_API_END (the body of each public header) is exported, and
// nothing else is: the private layers of src/ stay inside libsluice.so.1.
// tests/hygiene/api_surface.txt lists what that exports, and
// hygiene.api_surface fails on any difference, so that every change to the
// surface is deliberate.
//
// Thread safety: macros only.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_API_BEGIN _Pragma("GCC visibility push(default)")
#define SLUICE_API_END _Pragma("GCC visibility pop")
#else
#define SLUICE_API_BEGIN
#define SLUICE_API_END
#endif
