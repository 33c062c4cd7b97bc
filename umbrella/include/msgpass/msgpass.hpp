// The one header an application includes: buffers, nodes, groups, the factory,
// the configuration and the command line.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/config.hpp>
#include <msgpass/error.hpp>
#include <msgpass/group.hpp>
#include <msgpass/node.hpp>
#include <msgpass/node_factory.hpp>
#include <msgpass/stats.hpp>
#include <msgpass/wait.hpp>

namespace msgpass {

// Registers the built-in technologies (sci, tcp, auto) with the TechnologyRegistry
// and their configuration sections with config::SchemaRegistry. Idempotent and
// thread-safe. options() and NodeFactory::create() call it, and it runs before main
// in every program that calls them; a program that loads a configuration without
// them (a launcher, a tool) calls it before config::load().
void register_builtin_technologies();

// The command line of a msgpass program (config::parse_command_line) once the
// built-in technologies are registered: msgpass::options(argc, argv).
config::Options options(int argc, const char* const* argv);

} // namespace msgpass
