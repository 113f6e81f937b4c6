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
			if ping(addr) {
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

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	// A server with a password answers NOAUTH: it is up all the same.
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}
