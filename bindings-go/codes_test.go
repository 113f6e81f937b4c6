package ferrolock

import (
	"errors"
	"fmt"
	"testing"
)

// Every code of the core: Go constant, C library list and names agree; errors.Is works on each.
func TestErrorCodesWalkEveryCode(t *testing.T) {
	lib := libraryErrorCodes()
	if len(lib) != len(AllErrorCodes) {
		t.Fatalf("library has %d codes, Go has %d", len(lib), len(AllErrorCodes))
	}
	seen := map[ErrorCode]bool{}
	for i, code := range AllErrorCodes {
		if lib[i] != code {
			t.Errorf("code %d: library %d, Go %d", i, lib[i], code)
		}
		if got := libraryCodeName(code); got != code.String() {
			t.Errorf("code %d: library name %q, Go name %q", code, got, code.String())
		}
		if seen[code] || code < 100 || code >= 600 {
			t.Errorf("code %d duplicated or out of range", code)
		}
		seen[code] = true
		err := error(&Error{Code: code, Message: code.String() + ": x"})
		wrapped := errors.Join(errors.New("context"), err)
		if !errors.Is(wrapped, code) || Code(wrapped) != code {
			t.Errorf("errors.Is / Code fail for %v", code)
		}
		for _, other := range AllErrorCodes {
			if other != code && errors.Is(err, other) {
				t.Errorf("%v matches %v", code, other)
			}
		}
	}
	// Code also reads a bare ErrorCode (a sentinel, wrapped or not), and 0 for other errors.
	if Code(ErrNotHeld) != ErrNotHeld || Code(fmt.Errorf("wrapped: %w", ErrLost)) != ErrLost || Code(errors.New("x")) != 0 || Code(nil) != 0 {
		t.Errorf("Code of sentinels: %v, %v", Code(ErrNotHeld), Code(fmt.Errorf("wrapped: %w", ErrLost)))
	}
	if ErrorCode(7).String() != "ErrorCode(7)" || libraryCodeName(7) != "UNKNOWN" {
		t.Error("unknown codes are not reported as unknown")
	}
}

// An ErrorCode prints as its string code with %v and %s (fmt prefers Error() over String() for
// an error: it printed "ferrolock: NOT_HELD"), and errors.As finds the code of an *Error.
func TestErrorCodeFormatsAndAs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Code: ErrNotHeld, Message: "NOT_HELD: x"})
	var code ErrorCode
	if !errors.As(err, &code) || code != ErrNotHeld {
		t.Fatalf("errors.As(*ErrorCode): %v", code)
	}
	for format, want := range map[string]string{
		"%v": "NOT_HELD", "%s": "NOT_HELD", "%d": fmt.Sprint(uint32(ErrNotHeld)), "%q": `"NOT_HELD"`,
	} {
		if got := fmt.Sprintf(format, code); got != want {
			t.Errorf("Sprintf(%q, ErrNotHeld) = %q, want %q", format, got, want)
		}
	}
	if ErrNotHeld.Error() != "ferrolock: NOT_HELD" {
		t.Errorf("Error() = %q", ErrNotHeld.Error())
	}
}
