package docker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/fault"
)

// TestConnectTLS connects to a daemon that, like dockerd --tlsverify, only talks to clients
// whose certificate its CA signed: with the client files it answers, without them Connect
// fails as unavailable. (The daemon is a stand-in answering the ping; the TLS handshake and
// the adapter's wiring are what is tested. Real engines are tested over unix, tcp and ssh.)
func TestConnectTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := cert(t, nil, nil, "test CA", true)
	srvCert, srvKey := cert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := cert(t, ca, caKey, "client", false)
	files := &engine.TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	writePEM(t, files.CAFile, "CERTIFICATE", ca.Raw)
	writePEM(t, files.CertFile, "CERTIFICATE", cliCert.Raw)
	der, _ := x509.MarshalECPrivateKey(cliKey)
	writePEM(t, files.KeyFile, "EC PRIVATE KEY", der)

	var pings atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			pings.Add(1)
			w.Header().Set("API-Version", "1.47")
			fmt.Fprint(w, "OK")
		case strings.HasSuffix(r.URL.Path, "/version"):
			fmt.Fprint(w, `{"Version":"27.3.1","ApiVersion":"1.47","Os":"linux","Arch":"amd64","Components":[{"Name":"Engine"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	uri := "tcp://" + srv.Listener.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := docker.Connect(ctx, uri, docker.Options{TLS: files})
	if err != nil {
		t.Fatalf("Connect with the client certificate: %v", err)
	}
	defer c.Close()
	if pings.Load() == 0 {
		t.Fatal("the daemon was never pinged")
	}
	if _, err := docker.Connect(ctx, uri, docker.Options{TLS: &engine.TLSFiles{CAFile: files.CAFile}}); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("Connect without a client certificate = %v, want unavailable", err)
	}
	if _, err := docker.Connect(ctx, uri, docker.Options{}); err == nil {
		t.Fatal("plain HTTP to a TLS daemon connected")
	}
	if _, err := docker.Connect(ctx, uri, docker.Options{TLS: &engine.TLSFiles{CAFile: filepath.Join(dir, "missing.pem")}}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("Connect with a missing CA file = %v, want invalid", err)
	}
}

func cert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
