package events_test

import (
	"testing"

	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m, store.MigrateURL) }
