#pragma once
// zero::Engine: ZeRO data parallelism for a training loop the caller writes (engine_class.hpp
// describes it), with its members' definitions, so that any engine can be compiled where it is
// named. A unit that names only engines of zero::engines may include <zero/engines.hpp> instead,
// which leaves the definitions out (docs/compiled-engines.md).

#include "zero/engine/engine_class.hpp"
#include "zero/engine/engine_definitions.hpp"
