package ferrolock

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// millis rounds up and stays exact up to the largest Duration (adding 999,999 ns before
// dividing used to wrap around near the top).
func TestMillisRoundsUpWithoutOverflow(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want uint64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Millisecond, 1500},
		{time.Duration(math.MaxInt64), uint64(math.MaxInt64/int64(time.Millisecond)) + 1},
	}
	for _, c := range cases {
		if got := uint64(millis(c.d)); got != c.want {
			t.Errorf("millis(%d) = %d, want %d", int64(c.d), got, c.want)
		}
	}
}

// When a hold is lost, its context is cancelled before Lost() is closed, so a goroutine woken
// by Lost() always sees Context().Err() != nil.
func TestLostClosesAfterTheContextIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	st := &lostState{ch: make(chan struct{})}
	closedFirst := false
	st.cancel = func(cause error) {
		select {
		case <-st.ch:
			closedFirst = true
		default:
		}
		cancel(cause)
	}
	lost := &Error{Code: ErrLost, Message: "LOST: test"}
	st.end(lost)
	if closedFirst {
		t.Fatal("Lost() was closed before the context was cancelled")
	}
	select {
	case <-st.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() was never closed")
	}
	if !errors.Is(context.Cause(ctx), ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", context.Cause(ctx))
	}
}
