package pgcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	// Superuser is the role initdb creates; the only role pg_hba.conf lets in.
	Superuser = "bap"
	// Database is the database Start creates for the application.
	Database = "bap"

	port = 5432
	// maxSocketPath is the longest Unix socket path: sun_path is 108 bytes including the NUL.
	maxSocketPath = 107
	// fallbackSocketParent holds socket directories for data dirs whose own would be too long. It is
	// fixed (not $TMPDIR) so that every process computes the same directory for a data dir.
	fallbackSocketParent = "/tmp"
)

// socketFile is the name PostgreSQL gives its socket in the socket directory.
var socketFile = ".s.PGSQL." + strconv.Itoa(port)

// socketDirFor returns the socket directory for the absolute data dir dataDir and whether it is the
// short fallback under /tmp. The fallback serves paths too long for a socket, and paths with a comma,
// which a connection string cannot carry (host is a comma-separated list with no escape).
func socketDirFor(dataDir string) (dir string, fallback bool) {
	dir = filepath.Join(dataDir, "pgsock")
	if len(dir)+1+len(socketFile) <= maxSocketPath && !strings.Contains(dir, ",") {
		return dir, false
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(fallbackSocketParent, "bap-pg-"+hex.EncodeToString(sum[:8])), true
}

// fixedSettings are decided by pgcluster (they define who can connect and where) and cannot be overridden
// through Config.Settings.
var fixedSettings = []string{
	"listen_addresses", "port", "unix_socket_directories", "unix_socket_permissions", "unix_socket_group",
	"data_directory", "config_file", "hba_file", "ident_file", "include", "include_if_exists", "include_dir",
}

// defaultSettings suit a small embedded server that is a real store: durability settings stay at their
// safe defaults.
var defaultSettings = map[string]string{
	"max_connections":                     "100",
	"shared_buffers":                      "128MB",
	"idle_in_transaction_session_timeout": "60s",
	"fsync":                               "on",
	"synchronous_commit":                  "on",
	"full_page_writes":                    "on",
	"timezone":                            "UTC",
	"log_timezone":                        "UTC",
	"log_line_prefix":                     "%m [%p] %q%u@%d ",
	"logging_collector":                   "off", // pg_ctl -l writes the output to postgres.log
}

var settingName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$`)

func validateSettings(s map[string]string) error {
	for k, v := range s {
		if !settingName.MatchString(k) {
			return fmt.Errorf("setting name %q is not a PostgreSQL parameter name", k)
		}
		if slices.Contains(fixedSettings, k) {
			return fmt.Errorf("setting %q is fixed by pgcluster", k)
		}
		if strings.ContainsAny(v, "\x00\n\r") {
			return fmt.Errorf("setting %s: value contains a NUL or line break", k)
		}
	}
	return nil
}

// renderConf writes bap.conf: the defaults, then extra (validated), then the fixed connection settings.
func renderConf(socketDir string, extra map[string]string) []byte {
	s := maps.Clone(defaultSettings)
	maps.Copy(s, extra)
	var b strings.Builder
	b.WriteString("# Written by bap (server/internal/pgcluster) at every start; edits here are lost.\n")
	b.WriteString("# Override settings with ALTER SYSTEM, or with bap's configuration.\n")
	for _, k := range slices.Sorted(maps.Keys(s)) {
		fmt.Fprintf(&b, "%s = %s\n", k, confQuote(s[k]))
	}
	b.WriteString("# Connections: the Unix socket only.\n")
	fmt.Fprintf(&b, "listen_addresses = ''\n")
	fmt.Fprintf(&b, "port = %d\n", port)
	// The list element is double-quoted so that a comma in the path is not a list separator.
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", confQuote(`"`+socketDir+`"`))
	fmt.Fprintf(&b, "unix_socket_permissions = 0700\n")
	return []byte(b.String())
}

// confQuote quotes a postgresql.conf value.
func confQuote(v string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", "''") + "'"
}

// hbaConf trusts the superuser on the Unix socket and nobody else anywhere. The socket directory's
// mode (0700, owned by the cluster user) limits who can reach the socket at all.
const hbaConf = `# Written by bap (server/internal/pgcluster) at initdb.
# TYPE  DATABASE  USER  ADDRESS  METHOD
local   all       ` + Superuser + `         trust
`

// confInclude is appended to the postgresql.conf that initdb writes.
const confInclude = `
# Added by bap (server/internal/pgcluster): the settings bap manages, rewritten at every start.
# postgresql.auto.conf (ALTER SYSTEM) is read after this file and overrides it.
include 'bap.conf'
`

// dsnQuote quotes a value for a libpq keyword/value connection string.
func dsnQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r\v\f") {
		return v
	}
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
}
