// Checked 64-bit arithmetic for sizes derived from user input (token counts,
// model shapes, byte budgets): a value that remembers whether any step that
// made it overflowed, so a formula reads as written and is checked once at
// the end.
//
//   CheckedInt bytes = CheckedInt(2) * layers * heads * head_dim * tokens * bits / 8;
//   if (!bytes.ok()) return Status::InvalidArgument("... overflows 64-bit bytes");
//
// Division by zero also marks the result as not ok; a result that is not ok
// has value 0.
#pragma once

#include <cstdint>

namespace kvlab {

class CheckedInt {
 public:
  constexpr CheckedInt() = default;
  constexpr CheckedInt(int64_t v) : v_(v) {}  // NOLINT: implicit, so plain integers mix in

  bool ok() const { return ok_; }
  // The value; 0 once any step overflowed.
  int64_t value() const { return ok_ ? v_ : 0; }

  friend CheckedInt operator*(CheckedInt a, CheckedInt b) {
    CheckedInt r;
    r.ok_ = a.ok_ && b.ok_ && !__builtin_mul_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend CheckedInt operator+(CheckedInt a, CheckedInt b) {
    CheckedInt r;
    r.ok_ = a.ok_ && b.ok_ && !__builtin_add_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend CheckedInt operator-(CheckedInt a, CheckedInt b) {
    CheckedInt r;
    r.ok_ = a.ok_ && b.ok_ && !__builtin_sub_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend CheckedInt operator/(CheckedInt a, CheckedInt b) {
    CheckedInt r;
    r.ok_ = a.ok_ && b.ok_ && b.v_ != 0 && !(a.v_ == INT64_MIN && b.v_ == -1);
    r.v_ = r.ok_ ? a.v_ / b.v_ : 0;
    return r;
  }
  CheckedInt& operator*=(CheckedInt b) { return *this = *this * b; }
  CheckedInt& operator+=(CheckedInt b) { return *this = *this + b; }
  CheckedInt& operator-=(CheckedInt b) { return *this = *this - b; }

 private:
  int64_t v_ = 0;
  bool ok_ = true;
};

}  // namespace kvlab
