// A minimal JSON reader for the tests that read msgpass-bench's --json lines: enough
// to prove a line is one well-formed object and to look at its members.
#pragma once

#include <cctype>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace msgpass::test {

struct Json {
    enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
    double number = 0;
    std::string text;
    std::vector<Json> items;
    std::map<std::string, Json> members;
};

class Reader {
public:
    explicit Reader(const std::string& s) : s_(s) {}

    // The value that makes up the whole input; throws std::runtime_error otherwise.
    Json document() {
        Json v = value();
        space();
        if (i_ != s_.size()) fail("text after the value");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error(what + " at offset " + std::to_string(i_));
    }
    void space() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
            ++i_;
    }
    bool take(char c) {
        space();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!take(c)) fail(std::string("expected '") + c + "'");
    }
    bool word(const std::string& w) {
        if (s_.compare(i_, w.size(), w) != 0) return false;
        i_ += w.size();
        return true;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (i_ < s_.size() && s_[i_] != '"') {
            const char c = s_[i_++];
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i_ >= s_.size()) fail("unfinished escape");
            const char e = s_[i_++];
            if (e == 'u') {
                if (i_ + 4 > s_.size()) fail("short \\u escape");
                for (int k = 0; k < 4; ++k)
                    if (!std::isxdigit(static_cast<unsigned char>(s_[i_++]))) fail("bad \\u escape");
                out += '?';
            } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
                out += e;
            } else {
                fail("bad escape");
            }
        }
        if (i_ >= s_.size()) fail("unterminated string");
        ++i_;
        return out;
    }
    Json value() {
        space();
        if (i_ >= s_.size()) fail("missing value");
        Json v;
        const char c = s_[i_];
        if (c == '{') {
            ++i_;
            v.kind = Json::Kind::object;
            if (take('}')) return v;
            do {
                space();
                auto key = string();
                expect(':');
                if (!v.members.emplace(key, value()).second) fail("duplicate key " + key);
            } while (take(','));
            expect('}');
        } else if (c == '[') {
            ++i_;
            v.kind = Json::Kind::array;
            if (take(']')) return v;
            do
                v.items.push_back(value());
            while (take(','));
            expect(']');
        } else if (c == '"') {
            v.kind = Json::Kind::string;
            v.text = string();
        } else if (word("null")) {
            v.kind = Json::Kind::null;
        } else if (word("true") || word("false")) {
            v.kind = Json::Kind::boolean;
        } else {
            // JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
            const std::size_t start = i_;
            auto digits = [&] {
                const std::size_t from = i_;
                while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
                    ++i_;
                return i_ > from;
            };
            if (i_ < s_.size() && s_[i_] == '-') ++i_;
            if (i_ < s_.size() && s_[i_] == '0')
                ++i_;
            else if (!digits())
                fail("bad value");
            if (i_ < s_.size() && s_[i_] == '.') {
                ++i_;
                if (!digits()) fail("bad fraction");
            }
            if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
                ++i_;
                if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
                if (!digits()) fail("bad exponent");
            }
            v.kind = Json::Kind::number;
            v.number = std::stod(s_.substr(start, i_ - start));
        }
        return v;
    }

    const std::string& s_;
    std::size_t i_ = 0;
};

inline Json parse_json(const std::string& line) {
    return Reader(line).document();
}

} // namespace msgpass::test
