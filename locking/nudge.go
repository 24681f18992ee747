package locking

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Nudges: a mount waits on two documents that another mount changes, and
// polls both: a delegation holder its recall document (every recallPoll,
// idlePoll when idle), and a waiter the lock documents it waits for
// (every recallBackoff or lockBackoff). The one who changes them knows
// when, so it also sends the other a datagram that says "look now":
//
//   - a recall: the recaller, once its recall is written, nudges the
//     holder, which reads its recall document at once;
//   - a wake: a mount that releases locks others wait for (their waiting
//     markers are in the documents it writes) nudges them, and they try
//     again at once.
//
// A nudge only moves a poll forward. It carries no state: a lost,
// duplicated, late or forged one costs one read, so the protocol's
// guarantees rest on the documents alone, exactly as without nudges, and
// polling goes on as the fallback (a firewall, a mount of an older esfs).
// Each mount publishes where it listens and a random token in its session
// document (store.SessionDoc.Nudge), which others read anyway to judge
// whether a holder or waiter is alive (Observer); a nudge must carry the
// token, so that only those who can read the lock index can make a mount
// poll.
//
// One UDP datagram, "esfs-nudge1 <kind> <token>", to the published
// address: no connection to set up or keep, nothing to wait for.

const nudgeMagic = "esfs-nudge1"

// nudgeKind is what a nudge asks.
type nudgeKind string

const (
	nudgeRecall nudgeKind = "recall" // read your recall document
	nudgeWake   nudgeKind = "wake"   // try your locks again
)

// nudger sends and receives the nudges of one mount.
type nudger struct {
	conn   net.PacketConn
	public string // "host:port token", as published
	token  string
	log    *slog.Logger

	recall chan struct{} // capacity 1: the answer loop reads its recalls now
	wake   wakeup

	// peers: where other sessions listen, as their documents said.
	mu    lockorder.Mutex
	peers map[string]nudgePeer
	// asked: sessions whose documents are being read for their address.
	asked map[string]bool

	metrics *Metrics
}

// nudgePeer is where a session listens, and the token it wants.
type nudgePeer struct {
	addr  *net.UDPAddr
	token string
}

// newNudger listens on listen (host:port; port 0 for any) and publishes
// host (or, when empty, the host it listens on) with the port it got.
func newNudger(listen, host string, log *slog.Logger, metrics *Metrics) (*nudger, error) {
	conn, err := net.ListenPacket("udp", listen)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		conn.Close()
		return nil, err
	}
	la := conn.LocalAddr().(*net.UDPAddr)
	if host == "" {
		host = la.IP.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // no better guess: mounts of this machine reach it
	}
	n := &nudger{conn: conn, token: hex.EncodeToString(raw), log: log, metrics: metrics, recall: make(chan struct{}, 1),
		peers: map[string]nudgePeer{}, asked: map[string]bool{}}
	n.public = net.JoinHostPort(host, strconv.Itoa(la.Port)) + " " + n.token
	go n.receive()
	return n, nil
}

// close stops receiving; nudges are no longer sent.
func (n *nudger) close() {
	if n != nil {
		n.conn.Close()
	}
}

func (n *nudger) receive() {
	buf := make([]byte, 256)
	for {
		k, _, err := n.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		f := strings.Fields(string(buf[:k]))
		if len(f) != 3 || f[0] != nudgeMagic || f[2] != n.token || (f[1] != string(nudgeRecall) && f[1] != string(nudgeWake)) {
			n.metrics.nudges.WithLabelValues("", "refused").Inc()
			continue
		}
		n.metrics.nudges.WithLabelValues(f[1], "received").Inc()
		switch nudgeKind(f[1]) {
		case nudgeRecall:
			select {
			case n.recall <- struct{}{}:
			default: // a read is already due
			}
		case nudgeWake:
			n.wake.fire()
		}
	}
}

// learn records where session listens, from its document.
func (n *nudger) learn(d store.SessionDoc) {
	if n == nil || d.Nudge == "" {
		return
	}
	addr, token, ok := strings.Cut(d.Nudge, " ")
	if !ok {
		return
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peers[d.ID] = nudgePeer{addr: ua, token: token}
}

// send nudges session, if its address is known; lookup, if not nil,
// reads the session's document in the background for the next time.
func (n *nudger) send(session string, kind nudgeKind, lookup func(context.Context, string) (store.SessionDoc, error)) {
	if n == nil {
		return
	}
	n.mu.Lock()
	p, known := n.peers[session]
	if !known && lookup != nil && !n.asked[session] {
		// Read its document once, and nudge it then: late, but sooner
		// than its next poll most of the time.
		n.asked[session] = true
		go func() {
			ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), 5*time.Second)
			defer cancel()
			d, err := lookup(ctx, session)
			if err == nil && !d.Dead {
				n.learn(d)
				n.send(session, kind, nil)
			}
		}()
	}
	n.mu.Unlock()
	if !known {
		return
	}
	msg := nudgeMagic + " " + string(kind) + " " + p.token
	if _, err := n.conn.WriteTo([]byte(msg), p.addr); err != nil {
		n.log.Debug("sending a nudge", "session", session, "err", err)
		n.metrics.nudges.WithLabelValues(string(kind), "failed").Inc()
		return
	}
	n.metrics.nudges.WithLabelValues(string(kind), "sent").Inc()
}

// woken returns a channel closed at the next wake nudge (nil, which never
// is, without nudges).
func (n *nudger) woken() <-chan struct{} {
	if n == nil {
		return nil
	}
	return n.wake.next()
}

// wakeup lets waiters sleep until the next wake nudge.
type wakeup struct {
	mu lockorder.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next fire: take it before looking,
// so that a wake between the look and the sleep is not missed.
func (w *wakeup) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}
