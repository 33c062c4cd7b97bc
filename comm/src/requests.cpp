// Requests (BMI): test, wait and cancel of posted operations (docs/communicator.md,
// "Requests").
#include "impl.hpp"

#include <algorithm>

namespace msgpass::comm {

std::optional<Completion> Communicator::test(RequestId id) {
    impl_->check_factory("test");
    {
        std::lock_guard lock(impl_->mutex);
        impl_->check_live_locked(id);
    }
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    return impl_->collect_locked(id);
}

std::vector<Completion> Communicator::test_some(std::span<const RequestId> ids) {
    impl_->check_factory("test_some");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    for (RequestId id : ids) // all checked before any is collected: an error loses none
        impl_->check_live_locked(id);
    std::vector<Completion> out;
    for (RequestId id : ids)
        if (auto c = impl_->collect_locked(id)) out.push_back(std::move(*c));
    return out;
}

std::optional<Completion> Communicator::wait(RequestId id, std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait");
    return wait_any(std::span<const RequestId>(&id, 1), timeout);
}

std::optional<Completion> Communicator::wait_any(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait_any");
    const auto deadline = deadline_after(timeout);
    {
        std::lock_guard lock(impl_->mutex);
        for (RequestId id : ids)
            impl_->check_live_locked(id);
    }
    auto& im = *impl_;
    auto any_done = [&] {
        for (RequestId id : ids) {
            auto it = im.requests.find(id);
            if (it == im.requests.end() || it->second.done) return true;
        }
        return false;
    };
    if (!im.wait_until(any_done, deadline)) return std::nullopt;
    std::lock_guard lock(im.mutex);
    for (RequestId id : ids) {
        im.check_live_locked(id); // collected by another thread meanwhile
        if (auto c = im.collect_locked(id)) return c;
    }
    return std::nullopt;
}

std::vector<Completion> Communicator::wait_some(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait_some");
    std::vector<Completion> out;
    if (auto first = wait_any(ids, timeout)) {
        out.push_back(std::move(*first));
        std::lock_guard lock(impl_->mutex);
        for (RequestId id : ids)
            if (auto c = impl_->collect_locked(id)) out.push_back(std::move(*c));
    }
    return out;
}

std::vector<Completion> Communicator::wait_all(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait_all");
    const auto deadline = deadline_after(timeout);
    auto& im = *impl_;
    {
        std::lock_guard lock(im.mutex);
        for (RequestId id : ids)
            im.check_live_locked(id);
    }
    // Requests stay done until collected: the scan resumes where it stopped.
    std::size_t first_pending = 0;
    auto all_done = [&] {
        for (; first_pending < ids.size(); ++first_pending) {
            auto it = im.requests.find(ids[first_pending]);
            if (it != im.requests.end() && !it->second.done) return false;
        }
        return true;
    };
    (void)im.wait_until(all_done, deadline);
    std::vector<Completion> out;
    std::lock_guard lock(im.mutex);
    for (RequestId id : ids)
        if (auto c = im.collect_locked(id)) out.push_back(std::move(*c));
    return out;
}

bool Communicator::cancel(RequestId id) {
    impl_->check_factory("cancel");
    auto& im = *impl_;
    std::lock_guard lock(im.mutex);
    im.check_live_locked(id);
    auto& r = im.requests.at(id);
    if (r.done) return false;
    // Its buffer was given to the sender, who may be writing into it: it completes with
    // the message (or peer_lost), as a matched receive does in MPI.
    if (r.awaiting_data && r.single_copy) return false;
    // Its data message, holding the caller's memory, went: it completes when let go.
    if (r.releasing) return false;
    if (r.announced) { // the receiver withdraws it unless a receive cleared it first
        im.withdraw_locked(r);
        return true;
    }
    if (r.awaiting_data) { // what it cleared goes back for the next receive; its data completes that one
        for (auto it = im.awaiting.begin(); it != im.awaiting.end(); ++it)
            if (it->second == id) {
                im.awaiting.erase(it);
                break;
            }
        r.awaiting_data = false;
        im.return_locked(r);
    }
    if (r.is_send && r.peer == im.self) { // a synchronous send to itself: its message is taken back
        for (auto it = im.unexpected.begin(); it != im.unexpected.end(); ++it)
            if (it->sync_sender == id) {
                im.unexpected_bytes -= it->whole->size();
                im.unexpected.erase(it);
                break;
            }
    } else if (r.is_send) {
        if (auto b = im.backlog.find(r.peer); b != im.backlog.end()) {
            auto& q = b->second;
            q.erase(std::remove(q.begin(), q.end(), id), q.end());
            if (q.empty()) im.backlog.erase(b);
        }
        im.sync_backlogged_locked();
        r.pending.reset();
    } else {
        std::erase_if(im.expected, [id](const Impl::Expected& e) { return e.id == id; });
        r.completion.source = r.peer;
        r.completion.tag = r.tag;
        r.completion.user = r.user;
    }
    r.completion.status = Status::cancelled;
    r.done = true;
    im.changed.notify_all();
    return true;
}

} // namespace msgpass::comm
