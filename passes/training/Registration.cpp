// Compiles the generated registration of the training passes.
#include "passes/training/Passes.h"
