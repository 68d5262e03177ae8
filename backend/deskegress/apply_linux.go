//go:build linux

package deskegress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/florianl/go-nflog/v2"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"cubicle/backend/fault"
)

// Table is the name of the nftables table holding a desktop's egress policy.
const Table = "cubicle_egress"

// logGroup is the NFLOG group refused packets are logged to (groups are per network
// namespace, so one number serves every desktop).
const logGroup = 0x6375

// enforced is one desktop's enforcement: its network namespace (held open), the nftables
// connection into it, the DNS filter's sockets and the NFLOG reader.
type enforced struct {
	m     *Manager
	desk  Desktop
	ns    int // fd of the desktop's network namespace
	nsDev uint64
	nsIno uint64

	mu         sync.Mutex // the nftables connection and sets
	conn       *nftables.Conn
	set4, set6 *nftables.Set
	rules      atomic.Pointer[Rules]

	dns    []net.PacketConn
	nf     *nflog.Nflog
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (m *Manager) apply(ctx context.Context, d Desktop, r Rules) error {
	if d.PID <= 0 {
		return fault.Unavailable("egress policy: the engine reports no process for the desktop (an engine in a VM or on another machine?)")
	}
	nsPath := "/proc/" + strconv.Itoa(d.PID) + "/ns/net"
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return fault.Unavailable("egress policy: %v", err)
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err == nil && self.Dev == st.Dev && self.Ino == st.Ino {
		return fault.Conflict("egress policy: the desktop shares this machine's network (host networking); its egress cannot be enforced")
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fault.Unavailable("egress policy: shutting down")
	}
	old := m.desks[d.InstanceID]
	if old != nil && old.nsDev == uint64(st.Dev) && old.nsIno == st.Ino {
		// the same namespace: a policy change
		if r.Mode == Open {
			delete(m.desks, d.InstanceID)
			m.mu.Unlock()
			err := old.remove()
			old.close()
			return err
		}
		m.mu.Unlock()
		return old.install(r)
	}
	delete(m.desks, d.InstanceID)
	m.mu.Unlock()
	if old != nil {
		old.close()
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fault.Unavailable("egress policy: open the desktop's network namespace: %v (run Cubicle as root with a rootful engine)", err)
	}
	e := &enforced{m: m, desk: d, ns: fd, nsDev: uint64(st.Dev), nsIno: st.Ino}
	if e.conn, err = nftables.New(nftables.WithNetNSFd(fd)); err != nil {
		unix.Close(fd)
		return fault.Unavailable("egress policy: nftables: %v", err)
	}
	if r.Mode == Open {
		err := e.remove()
		e.close()
		return err
	}
	if err := e.start(r); err != nil {
		e.close()
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		e.close()
		return fault.Unavailable("egress policy: shutting down")
	}
	m.desks[d.InstanceID] = e
	m.mu.Unlock()
	return nil
}

// start opens the DNS filter's sockets and the NFLOG reader in the namespace, installs the
// table and starts serving.
func (e *enforced) start(r Rules) error {
	pc4, err := listenIn(e.ns, "udp4", "127.0.0.1:0")
	if err != nil {
		return fault.Unavailable("egress policy: DNS filter in the desktop's network namespace: %v", err)
	}
	e.dns = append(e.dns, pc4)
	port := pc4.LocalAddr().(*net.UDPAddr).Port
	if pc6, err := listenIn(e.ns, "udp6", "[::1]:"+strconv.Itoa(port)); err == nil {
		e.dns = append(e.dns, pc6)
	} // no IPv6 loopback in the desktop: its IPv6 DNS is refused like any other packet
	nf, err := nflog.Open(&nflog.Config{NetNS: e.ns, Group: logGroup, Copymode: nflog.CopyPacket, Bufsize: 96})
	if err != nil {
		return fault.Unavailable("egress policy: NFLOG in the desktop's network namespace: %v", err)
	}
	e.nf = nf
	if err := e.install(r); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if err := nf.RegisterWithErrorFunc(ctx, e.logged, func(err error) int {
		if ctx.Err() != nil {
			return 1
		}
		var op interface{ Timeout() bool }
		if errors.As(err, &op) && op.Timeout() {
			return 0
		}
		e.m.cfg.Logger.Warn("egress log reader", "instance", e.desk.InstanceID, "err", err)
		return 0
	}); err != nil {
		return fault.Unavailable("egress policy: NFLOG: %v", err)
	}
	for _, pc := range e.dns {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.serveDNS(ctx, pc)
		}()
	}
	return nil
}

// close stops serving and lets go of the namespace (its table stays until the namespace goes).
func (e *enforced) close() {
	if e.cancel != nil {
		e.cancel()
	}
	for _, pc := range e.dns {
		pc.Close()
	}
	if e.nf != nil {
		e.nf.Close()
	}
	e.wg.Wait()
	if e.conn != nil {
		e.conn.CloseLasting()
	}
	if e.ns > 0 {
		unix.Close(e.ns)
		e.ns = -1
	}
}

// remove deletes the table (mode open).
func (e *enforced) remove() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	tables, err := e.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fault.Unavailable("egress policy: nftables in the desktop's network namespace: %v (run Cubicle as root with a rootful engine)", err)
	}
	for _, t := range tables {
		if t.Name == Table {
			e.conn.DelTable(t)
			if err := e.conn.Flush(); err != nil {
				return fmt.Errorf("egress policy: remove the table: %w", err)
			}
		}
	}
	return nil
}

// install replaces the table with one for rules r.
func (e *enforced) install(r Rules) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.conn
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fault.Unavailable("egress policy: nftables in the desktop's network namespace: %v (run Cubicle as root with a rootful engine)", err)
	}
	for _, t := range tables {
		if t.Name == Table {
			c.DelTable(t)
		}
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: Table})
	set4 := &nftables.Set{Table: t, Name: "names4", KeyType: nftables.TypeIPAddr}
	set6 := &nftables.Set{Table: t, Name: "names6", KeyType: nftables.TypeIP6Addr}
	if err := c.AddSet(set4, nil); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	if err := c.AddSet(set6, nil); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, uint16(e.dns[0].LocalAddr().(*net.UDPAddr).Port))
	nat := c.AddChain(&nftables.Chain{Name: "dns", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	fams := []byte{unix.NFPROTO_IPV4}
	if len(e.dns) > 1 {
		fams = append(fams, unix.NFPROTO_IPV6)
	}
	for _, fam := range fams {
		c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: cat(nfproto(fam), l4(unix.IPPROTO_UDP, 53),
			[]expr.Any{&expr.Immediate{Register: 1, Data: port}, &expr.Redir{RegisterProtoMin: 1}})})
	}
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	rule := func(exprs ...[]expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(exprs...)}) }
	ok := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	rule([]expr.Any{&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo}}, ok)
	est := make([]byte, 4)
	binary.NativeEndian.PutUint32(est, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	rule([]expr.Any{&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: est, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)}}, ok)
	// what the DNS redirect made of a query, and the desktop's own loopback
	for _, p := range []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")} {
		rule(daddrIn(p), ok)
	}
	// IPv6 neighbour and router discovery (types 133-136), without which no IPv6 address is reached
	rule(nfproto(unix.NFPROTO_IPV6), []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{136}}}, ok)
	for _, p := range r.Prefixes {
		rule(daddrIn(p), ok)
	}
	rule(nfproto(unix.NFPROTO_IPV4), []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set4.Name, SetID: set4.ID}}, ok)
	rule(nfproto(unix.NFPROTO_IPV6), []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: set6.Name, SetID: set6.ID}}, ok)
	// everything else: logged to the reader, then refused at once
	rule([]expr.Any{&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_SNAPLEN, Group: logGroup, Snaplen: 96}})
	rule([]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})
	rule([]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
	if err := c.Flush(); err != nil {
		return fault.Unavailable("egress policy: install the rules in the desktop's network namespace: %v", err)
	}
	e.set4, e.set6 = set4, set6
	e.rules.Store(&r)
	return nil
}

// admit opens addresses an allowed name resolved to.
func (e *enforced) admit(addrs []netip.Addr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var v4, v6 []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			b := a.As4()
			v4 = append(v4, nftables.SetElement{Key: b[:]})
		} else {
			b := a.As16()
			v6 = append(v6, nftables.SetElement{Key: b[:]})
		}
	}
	if len(v4) > 0 {
		if err := e.conn.SetAddElements(e.set4, v4); err != nil {
			return err
		}
	}
	if len(v6) > 0 {
		if err := e.conn.SetAddElements(e.set6, v6); err != nil {
			return err
		}
	}
	return e.conn.Flush()
}

// serveDNS answers the desktop's DNS queries on pc until ctx ends (at most 32 at a time).
func (e *enforced) serveDNS(ctx context.Context, pc net.PacketConn) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				e.m.cfg.Logger.Warn("egress DNS filter stopped", "instance", e.desk.InstanceID, "err", err)
			}
			return
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		default:
			continue // a flood: drop the query, the client retries
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
			defer cancel()
			reply, blocked := answer(lctx, q, *e.rules.Load(), e.m.cfg.Lookup, e.admit)
			if reply != nil {
				pc.WriteTo(reply, from)
			}
			if blocked != "" {
				e.m.blocked(Blocked{InstanceID: e.desk.InstanceID, AgentID: e.desk.AgentID, AccountID: e.desk.AccountID,
					Destination: blocked, Proto: "dns", Time: time.Now().UTC()})
			}
		}()
	}
}

// logged is the NFLOG hook: one refused packet.
func (e *enforced) logged(a nflog.Attribute) int {
	if a.Payload == nil {
		return 0
	}
	b := Blocked{InstanceID: e.desk.InstanceID, AgentID: e.desk.AgentID, AccountID: e.desk.AccountID, Time: time.Now().UTC()}
	if a.Timestamp != nil {
		b.Time = a.Timestamp.UTC()
	}
	dst, proto, port, ok := parsePacket(*a.Payload)
	if !ok {
		return 0
	}
	b.Destination, b.Proto, b.Port = dst.String(), proto, port
	e.m.blocked(b)
	return 0
}

// listenIn opens a packet socket inside the network namespace ns: a locked thread enters it,
// opens the socket and returns to its own namespace (a thread that cannot return is not
// unlocked, so it ends with its goroutine).
func listenIn(ns int, network, addr string) (net.PacketConn, error) {
	type res struct {
		pc  net.PacketConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- res{err: err}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- res{err: fmt.Errorf("enter the desktop's network namespace: %w", err)}
			return
		}
		pc, err := net.ListenPacket(network, addr)
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{pc, err}
	}()
	r := <-ch
	return r.pc, r.err
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func nfproto(fam byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}}}
}

// daddrIn matches packets to an address in p (IPv4 or IPv6).
func daddrIn(p netip.Prefix) []expr.Any {
	off, n, fam := uint32(16), 4, byte(unix.NFPROTO_IPV4)
	if p.Addr().Is6() {
		off, n, fam = 24, 16, unix.NFPROTO_IPV6
	}
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return cat(nfproto(fam), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(n)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(n), Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	})
}

// l4 matches a transport protocol and destination port.
func l4(proto byte, port uint16) []expr.Any {
	p := make([]byte, 2)
	binary.BigEndian.PutUint16(p, port)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p},
	}
}
