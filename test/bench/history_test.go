package bench

import "testing"

// TestKeepHistory: a benchmark run rewrites the table of RESULTS.md and
// keeps the history written below it.
func TestKeepHistory(t *testing.T) {
	old := "# esfs benchmark results\n\n| old table |\n\n## History\n\nWhat it cost.\n"
	got := keepHistory("# esfs benchmark results\n\n| new table |\n", old)
	want := "# esfs benchmark results\n\n| new table |\n\n## History\n\nWhat it cost.\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := keepHistory("| t |\n", "| old |\n"); got != "| t |\n" {
		t.Errorf("without a history: %q", got)
	}
}
