// The C side of the loss callback: the library calls the trampoline on one of its threads, which
// calls into Go (ferrolockGoLost, exported from held.go). A cgo.Handle travels as user_data.
#include <stdint.h>

#include "ferrolock.h"
#include "_cgo_export.h"

static void ferrolock_go_lost_trampoline(void *user_data, const ferrolock_error *error) {
  ferrolockGoLost((uintptr_t)user_data, ferrolock_error_code(error), (char *)ferrolock_error_message(error));
}

ferrolock_result ferrolock_go_on_lost(const ferrolock_guard *guard, uintptr_t handle, ferrolock_error **out_error) {
  return ferrolock_guard_on_lost(guard, ferrolock_go_lost_trampoline, (void *)handle, out_error);
}
