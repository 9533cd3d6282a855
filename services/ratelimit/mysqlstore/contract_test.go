package mysqlstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// TestContract runs the global store's contract suite on a real MariaDB.
func TestContract(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	storetest.TestGlobal(t, func(*testing.T) store.Global { return New(sqlDB) })
}

// TestContractOverTLS runs the contract suite on a MariaDB that serves TLS,
// through a DSN whose tls parameter names a configuration that trusts the
// server's private CA, and checks that the session is encrypted.
func TestContractOverTLS(t *testing.T) {
	ca := testserver.NewCA(t)
	certFile, keyFile, caFile := ca.ServerFiles(t, t.TempDir())
	m := testserver.StartMariaDB(t, "--ssl-cert="+certFile, "--ssl-key="+keyFile, "--ssl-ca="+caFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	if err := mysql.RegisterTLSConfig("test-ca", &tls.Config{RootCAs: pool}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cmdutil.ParseMySQLDSN(m.DSN + "&tls=test-ca")
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := cmdutil.OpenMySQL(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	var name, cipher string
	if err := sqlDB.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Fatalf("the session's cipher: %q, %v; want an encrypted session", cipher, err)
	}
	if err := db.Migrate(context.Background(), sqlDB); err != nil {
		t.Fatal(err)
	}
	storetest.TestGlobal(t, func(*testing.T) store.Global { return New(sqlDB) })
}
