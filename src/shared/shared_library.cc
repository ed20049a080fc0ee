// libsluice.so.1 is libsluice.a whole (src/CMakeLists.txt links it with
// --whole-archive); a shared library target needs a source file of its own,
// and this is it. It defines nothing.
