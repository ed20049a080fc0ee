// The program that builds the test suites' precompiled header
// (tests/CMakeLists.txt, sluice_test_pch); every gtest executable reuses it.
// An executable, so that it is compiled with the tests' own flags (-fPIE):
// GCC refuses a header precompiled with other code-generation flags.
int main() { return 0; }
