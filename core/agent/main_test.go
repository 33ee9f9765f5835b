package agent

import (
	"testing"

	"github.com/meshrelay/meshrelay/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
