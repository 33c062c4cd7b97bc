#include <msgpass/sci/factory.hpp>

namespace msgpass::sci {
void register_technology() {}
} // namespace msgpass::sci
