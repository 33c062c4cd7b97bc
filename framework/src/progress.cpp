// The progress driver of the implementer kit (msgpass/kit/progress.hpp).
#include <msgpass/kit/progress.hpp>

#include <algorithm>

namespace msgpass::kit {

void ProgressDriver::add(Progressing* node) {
    std::lock_guard lock(mutex_);
    nodes_.push_back(node);
}

void ProgressDriver::remove(Progressing* node) {
    std::lock_guard lock(mutex_);
    std::erase(nodes_, node);
}

void ProgressDriver::progress_slow(const Progressing* except) {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return; // another thread is driving the queues
    for (Progressing* node : nodes_) {
        if (node != except) node->try_flush_queue();
    }
}

void ProgressDriver::announce() {
    std::lock_guard lock(mutex_);
    for (Progressing* node : nodes_)
        node->state_changed();
}

} // namespace msgpass::kit
