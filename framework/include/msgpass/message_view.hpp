// MessageView: a received message lent to the caller by Node::receive_view, the
// Buffer-free receive path. Its bytes stay valid and unchanged until the view is
// released (release(), or its destruction); then their memory goes back to the
// layer (sci: the receive slot, to the sender, once every message of the slot was
// released). A technology lends its own memory through a Lender; the default
// implementation holds the received Buffer instead.
#pragma once

#include <msgpass/buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace msgpass {

class MessageView {
public:
    // Takes back what a technology lent: called once per view, from the thread that
    // releases it (any thread).
    class Lender {
    public:
        virtual void give_back(void* context, std::uint64_t token) noexcept = 0;

    protected:
        Lender() = default;
        Lender(const Lender&) = default;
        Lender& operator=(const Lender&) = default;
        ~Lender() = default;
    };

    // No message (a receive that found none).
    MessageView() = default;
    // Lent memory: lender->give_back(context, token) when released.
    MessageView(std::span<const std::byte> bytes, NodeId source, Lender* lender, void* context,
                std::uint64_t token) noexcept
        : bytes_(bytes), source_(source), engaged_(true), lender_(lender), context_(context), token_(token) {}
    // A received buffer, held until the view is released (the default implementation
    // of Node::receive_view). A buffer of several fragments is copied into one piece.
    // A null buffer makes an empty view.
    explicit MessageView(BufferPtr buffer);

    MessageView(const MessageView&) = delete;
    MessageView& operator=(const MessageView&) = delete;
    MessageView(MessageView&& other) noexcept { take(other); }
    MessageView& operator=(MessageView&& other) noexcept {
        if (this != &other) {
            release();
            take(other);
        }
        return *this;
    }
    ~MessageView() { release(); }

    // Whether the view holds a message (one of 0 bytes included).
    explicit operator bool() const noexcept { return engaged_; }
    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
    [[nodiscard]] const std::byte* data() const noexcept { return bytes_.data(); }
    [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }
    // The node that sent the message (0 for an empty view).
    [[nodiscard]] NodeId source() const noexcept { return source_; }

    // Gives the message back to the layer; the bytes must not be read afterwards.
    // The view is empty then. Nothing when it is empty already.
    void release() noexcept {
        if (!engaged_) return;
        engaged_ = false;
        bytes_ = {};
        if (lender_ != nullptr) lender_->give_back(context_, token_);
        lender_ = nullptr;
        held_.reset();
    }

private:
    void take(MessageView& other) noexcept {
        bytes_ = std::exchange(other.bytes_, {});
        source_ = other.source_;
        engaged_ = std::exchange(other.engaged_, false);
        lender_ = std::exchange(other.lender_, nullptr);
        context_ = other.context_;
        token_ = other.token_;
        held_ = std::move(other.held_);
    }

    std::span<const std::byte> bytes_;
    NodeId source_ = 0;
    bool engaged_ = false;
    Lender* lender_ = nullptr;
    void* context_ = nullptr;
    std::uint64_t token_ = 0;
    BufferPtr held_; // the default implementation's buffer
};

} // namespace msgpass
