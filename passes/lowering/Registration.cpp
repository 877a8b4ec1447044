// Compiles the generated registration of the lowering passes.
#include "passes/lowering/Passes.h"
