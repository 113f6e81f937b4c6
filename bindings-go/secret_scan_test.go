package ferrolock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// Secret scan (shared/RELIABILITY.md "No secrets in logs/errors", peer bug B20): a random
// sentinel password goes through a successful connection (a lock taken, lost and refused; the
// default user and an ACL user), WRONGPASS, a TLS failure (rediss:// to a plain server), a refused
// connection, a server that never answers, Redlock without a quorum and malformed URLs. Each case
// runs in a child process (this test binary, TestSecretScanChild, with RUST_LOG=trace) that prints
// everything the binding exposes: err.Error(), %v %+v %#v %q %T, the *Error's fields, the unwrap
// chain, the Client, Lock and Held values (%#v), the lost hold's context cause, and a log.Print
// of the error. The child's whole stdout + stderr is grepped for the sentinel: 0 hits, while each
// error still says what went wrong. A control child prints the URL, and the same grep finds it.
// (The server's host:port is not asserted: the core's connection errors do not carry it.)

const (
	scanModeEnv = "FERROLOCK_SECRET_SCAN_MODE"
	scanURLsEnv = "FERROLOCK_SECRET_SCAN_URLS"
	scanUser    = "ferrolock-scan"
)

func scanDump(label string, v any) {
	if s, ok := v.(string); ok {
		fmt.Printf("--- %s\n%s\n", label, s)
	} else {
		fmt.Printf("--- %s\n%#v\n", label, v)
	}
}

func scanDumpErr(label string, err error) {
	if err == nil {
		scanDump(label, "<nil>")
		return
	}
	scanDump(label+" Error", err.Error())
	scanDump(label+" forms", fmt.Sprintf("%v | %+v | %#v | %q | %T | %s", err, err, err, err, err, ferrolock.Code(err)))
	var e *ferrolock.Error
	if errors.As(err, &e) {
		scanDump(label+" fields", fmt.Sprintf("code=%d %v message=%s", uint32(e.Code), e.Code, e.Message))
	}
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
		scanDump(label+" unwrapped", fmt.Sprintf("%#v %v", u, u))
	}
	log.Printf("ferrolock error: %v", err) // to stderr, like an application's log
}

// TestSecretScanChild is the child process of TestSecretScan; it does nothing when run directly.
func TestSecretScanChild(t *testing.T) {
	mode := os.Getenv(scanModeEnv)
	if mode == "" {
		t.Skip("the child of TestSecretScan")
	}
	urls := strings.Fields(os.Getenv(scanURLsEnv))
	ctx := context.Background()
	opts := &ferrolock.ClientOptions{ConnectTimeout: 300 * time.Millisecond, ResponseTimeout: 300 * time.Millisecond}
	switch mode {
	case "control":
		scanDump("url", urls[0])
	case "ok":
		c, err := ferrolock.Connect(ctx, urls[0], nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer c.Close()
		scanDump("client", c)
		scanDump("client %+v", fmt.Sprintf("%+v %v", c, c))
		l, err := c.Lock("secret-scan", &ferrolock.LockOptions{TTL: 600 * time.Millisecond, Renew: ferrolock.RenewAlways})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		scanDump("lock", l)
		h, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		scanDump("held", h)
		scanDump("held %+v", fmt.Sprintf("%+v %v %v", h, h.State(), h.Context()))
		if _, err := c.ForceUnlock(ctx, "secret-scan"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Lost():
		case <-time.After(3 * time.Second):
			t.Fatal("not lost")
		}
		<-h.Context().Done() // cancelled just after Lost() is closed
		scanDumpErr("lost cause", context.Cause(h.Context()))
		scanDumpErr("ensure after loss", h.Ensure(0))
		scanDumpErr("extend after loss", h.Extend(ctx, time.Second))
		scanDumpErr("release after loss", h.Release(ctx))
		scanDump("OK", "connected, held, lost")
	case "fail", "redlock":
		var err error
		if mode == "redlock" {
			_, err = ferrolock.ConnectRedlock(ctx, urls, opts)
		} else {
			_, err = ferrolock.Connect(ctx, urls[0], opts)
		}
		if err == nil {
			scanDump("UNEXPECTED", "connected")
			return
		}
		scanDump("code", ferrolock.Code(err).String())
		scanDumpErr("connect", err)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

func TestSecretScan(t *testing.T) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret := "S3ntinel-pw-" + hex.EncodeToString(b)
	server := strings.TrimPrefix(startRedis(t, "--requirepass", secret,
		"--user", scanUser, "on", ">"+secret, "~*", "&*", "+@all"), "redis://")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // completes the handshake, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentAddr := silent.Addr().String()
	url := func(scheme, user, pass, addr string) string {
		return fmt.Sprintf("%s://%s:%s@%s", scheme, user, pass, addr)
	}

	child := func(t *testing.T, mode string, urls ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSecretScanChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), scanModeEnv+"="+mode, scanURLsEnv+"="+strings.Join(urls, " "),
			"RUST_LOG=trace", "RUST_BACKTRACE=full", "GOTRACEBACK=all")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %s failed: %v\n%s", mode, err, out)
		}
		return string(out)
	}

	t.Run("control", func(t *testing.T) {
		u := url("redis", "", secret, server)
		if out := child(t, "control", u); strings.Count(out, secret) != 1 {
			t.Fatalf("the scan does not find the sentinel the child printed:\n%s", out)
		}
		built := fmt.Errorf("cannot reach %s", u)
		if !strings.Contains(fmt.Sprintf("%v %#v", built, built), secret) {
			t.Fatal("the scan does not find the sentinel in an error that carries it")
		}
	})

	for _, u := range []string{url("redis", "", secret, server), url("redis", "default", secret, server),
		url("redis", scanUser, secret, server)} {
		t.Run("success", func(t *testing.T) {
			out := child(t, "ok", u)
			if !strings.Contains(out, "--- OK") || !strings.Contains(out, "--- held") ||
				!strings.Contains(out, "LOST: ") {
				t.Fatalf("the child did not get through the success path:\n%s", out)
			}
			if n := strings.Count(out, secret); n != 0 {
				t.Fatalf("the password appears %d times:\n%s", n, out)
			}
		})
	}

	codeRE := regexp.MustCompile(`--- code\n(\w+)`)
	for _, c := range []struct {
		label string
		mode  string
		urls  []string
		codes []string
		says  string // the message must still say what went wrong
	}{
		{"wrong password", "fail", []string{url("redis", "", "wrong-"+secret, server)}, []string{"AUTH"}, "WRONGPASS"},
		{"unknown user", "fail", []string{url("redis", "nobody", secret, server)}, []string{"AUTH"}, "WRONGPASS"},
		{"ACL user, wrong password", "fail", []string{url("redis", scanUser, secret+"-wrong", server)}, []string{"AUTH"}, "WRONGPASS"},
		// No handshake reply from a plain server: a TIMEOUT with a TLS hint.
		{"rediss:// to a plain server", "fail", []string{url("rediss", "", secret, server)}, []string{"TLS", "TIMEOUT"}, "TLS"},
		{"connection refused", "fail", []string{url("redis", "", secret, deadAddr)}, []string{"CONNECTION"}, "refused"},
		{"no answer", "fail", []string{url("redis", scanUser, secret, silentAddr)}, []string{"TIMEOUT", "CONNECTION"}, ""},
		{"redlock without a quorum", "redlock", []string{url("redis", "", secret, server),
			url("redis", "", secret, deadAddr), url("redis", "", secret, silentAddr)}, []string{"QUORUM_NOT_REACHED"}, "of 3 masters"},
		{"port not a number", "fail", []string{url("redis", "", secret, "127.0.0.1:notaport")}, []string{"INVALID_URL"}, ""},
		{"unknown scheme", "fail", []string{url("http", "", secret, "127.0.0.1:6379")}, []string{"INVALID_URL"}, ""},
		{"db not a number", "fail", []string{url("redis", "", secret, "127.0.0.1:6379/notadb")}, []string{"INVALID_URL"}, ""},
		{"unclosed IPv6 bracket", "fail", []string{url("redis", "", secret, "[::1/0")}, []string{"INVALID_URL"}, ""},
	} {
		t.Run(c.label, func(t *testing.T) {
			out := child(t, c.mode, c.urls...)
			m := codeRE.FindStringSubmatch(out)
			if strings.Contains(out, "--- UNEXPECTED") || m == nil || !contains(c.codes, m[1]) {
				t.Fatalf("want a %v error:\n%s", c.codes, out)
			}
			if !strings.Contains(out, "ferrolock error: ") || !strings.Contains(out, c.says) {
				t.Fatalf("the error was not printed, or does not say %q:\n%s", c.says, out)
			}
			if n := strings.Count(out, secret); n != 0 {
				t.Fatalf("the password appears %d times:\n%s", n, out)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
