//===- TestPasses.h - testing-only passes -----------------------*- C++ -*-===//
//
// Passes that plant faults for tests (never part of a Tessera pipeline).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_LIB_TESTPASSES_H
#define TESSERA_TEST_LIB_TESTPASSES_H

namespace tessera::test {

/// Registers `tsr-test-drop-collective` (TestDropCollective.cpp).
void registerTestPasses();

} // namespace tessera::test

#endif // TESSERA_TEST_LIB_TESTPASSES_H
