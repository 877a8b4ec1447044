// Compiles the generated registration of the sharding passes.
#include "passes/sharding/Passes.h"
