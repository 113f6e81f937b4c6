package ferrolock_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startRedis starts a throwaway redis-server on a free loopback port and stops it (by pid) when
// the test ends, also on failure. It returns the server's URL.
func startRedis(t testing.TB, extra ...string) string {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir()}, extra...)
		cmd := exec.Command("redis-server", args...)
		cmd.Stdout, cmd.Stderr = nil, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for i := 0; i < 100; i++ {
			if answersAs(addr, cmd.Process.Pid, extra) {
				t.Cleanup(stop)
				return "redis://" + addr
			}
			select {
			case <-exited:
				i = 100 // port taken: try another
			case <-time.After(20 * time.Millisecond):
			}
		}
		stop()
	}
	t.Fatal("could not start redis-server on a free port")
	return ""
}

// answersAs reports whether the server at addr is process pid: ours, not a server that already
// had the port (ours then fails to bind and exits, but a look in between would find the other).
// A --requirepass in extra authenticates the look.
func answersAs(addr string, pid int, extra []string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	req := "INFO server\r\n"
	for i, a := range extra {
		if a == "--requirepass" && i+1 < len(extra) {
			p := extra[i+1]
			req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(p), p) + req
		}
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return false
	}
	r := bufio.NewReader(c)
	want := fmt.Sprintf("process_id:%d", pid)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if strings.HasPrefix(line, "-") {
			return false // NOAUTH, or a refused AUTH: not ours to use
		}
		if strings.TrimRight(line, "\r\n") == want {
			return true
		}
	}
}
