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
