// The sci technology's factory: SCINodeFactory of the seed, over emulated SCI
// remote memory (POSIX shared memory).
#pragma once

#include <msgpass/node_factory.hpp>

namespace msgpass::sci {

// Registers "sci" with the TechnologyRegistry. Idempotent.
void register_technology();

} // namespace msgpass::sci
