package ferrolock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// A fenced critical section bounded by a deadline, stopping early if the lock is lost.
func Example() {
	ctx := context.Background()
	client, err := ferrolock.Connect(ctx, "redis://127.0.0.1:6379", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	lock, err := client.Lock("orders:42", nil) // watchdog-renewed lease
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Close()

	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held, err := lock.Acquire(wait)
	if errors.Is(err, ferrolock.ErrAcquireTimeout) {
		fmt.Println("busy")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer held.Close()
	defer held.Release(ctx)

	work := held.Context() // cancelled if the lock is lost
	select {
	case <-work.Done():
		fmt.Println("lost:", context.Cause(work))
	case <-time.After(10 * time.Millisecond):
		fmt.Println("wrote with fence", held.Fence())
	}
}
