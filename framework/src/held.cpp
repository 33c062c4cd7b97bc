// The calling thread's held sends (kit/held.hpp).
#include <msgpass/kit/held.hpp>

#include <utility>
#include <vector>

namespace msgpass::kit::held {

namespace {
struct Here {
    bool input_waiting = false;
    std::vector<std::weak_ptr<Writer>> writers;
    std::vector<std::weak_ptr<Writer>> writing; // (keeps its capacity between rounds)
};
thread_local Here here;
} // namespace

void input(bool waiting) noexcept {
    here.input_waiting = waiting;
}

bool input_waiting() noexcept {
    return here.input_waiting;
}

void hold(std::weak_ptr<Writer> writer) {
    here.writers.push_back(std::move(writer));
}

void write_held() noexcept {
    here.input_waiting = false;
    if (here.writers.empty()) return;
    here.writing.swap(here.writers);
    for (const auto& w : here.writing) {
        if (const auto writer = w.lock()) writer->write_held();
    }
    here.writing.clear();
}

} // namespace msgpass::kit::held
