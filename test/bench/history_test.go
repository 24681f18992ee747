package bench

import (
	"strings"
	"testing"
)

const oldResults = `# esfs benchmark results

Produced by ` + "`full run`" + ` on vm.

| case | workload | ratio |
|---|---|---:|
| stat_hot | lstat | 1.21 |
| create_1t | creates | 2.88 |

Notes from the run:

- stat_hot: noisy

## History

What it cost.
`

// TestKeepHistory: a benchmark run rewrites the table of RESULTS.md and
// keeps the history written below it.
func TestKeepHistory(t *testing.T) {
	main := &table{intro: "# esfs benchmark results\n\nProduced by `new run`.\n\n", header: "| case | workload | ratio |\n|---|---|---:|\n",
		rows: []string{"| stat_hot | lstat | 1.10 |"}}
	got := compose(oldResults, main, nil, false)
	want := "# esfs benchmark results\n\nProduced by `new run`.\n\n| case | workload | ratio |\n|---|---|---:|\n| stat_hot | lstat | 1.10 |\n\n## History\n\nWhat it cost.\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := compose("| old |\n", main, nil, false); got != main.String() {
		t.Errorf("without a history: %q", got)
	}
}

// TestPartialRunKeepsRows: a run of some groups replaces their rows, keeps
// the others and their notes, and says which rows it replaced; the peer
// table goes before the history, and a run without peer rows keeps the
// old peer table as it was.
func TestPartialRunKeepsRows(t *testing.T) {
	main := &table{intro: "# esfs benchmark results\n\nProduced by `only create`.\n\n", header: "| case | workload | ratio |\n|---|---|---:|\n",
		rows: []string{"| create_1t | creates | 2.50 |", "| create_8t | creates | 4.00 |"}}
	peer := &table{intro: peerHeading + "\n\nProduced by `only mdtest`.\n\n", header: "| case | esfs |\n|---|---:|\n",
		rows: []string{"| mdtest stat | 752/s |"}}
	got := compose(oldResults, main, peer, true)
	for _, want := range []string{
		"Produced by `full run` on vm.\n\nRows create_1t, create_8t: produced by `only create`.\n\n| case",
		"| stat_hot | lstat | 1.21 |\n| create_1t | creates | 2.50 |\n| create_8t | creates | 4.00 |\n",
		"- stat_hot: noisy\n\n" + peerHeading + "\n",
		"| mdtest stat | 752/s |\n\n## History\n\nWhat it cost.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	again := compose(got, nil, nil, true)
	if again != got {
		t.Errorf("a run without rows changed the file:\n%s\nwas:\n%s", again, got)
	}
	tools := &table{intro: peerHeading + "\n\nProduced by `only tools`.\n\n", header: "| case | esfs |\n|---|---:|\n",
		rows: []string{"| cp -a | 2.57 s |"}}
	got = compose(got, nil, tools, true)
	if !strings.Contains(got, "| mdtest stat | 752/s |\n| cp -a | 2.57 s |\n") || !strings.Contains(got, "Rows cp -a: produced by `only tools`.") {
		t.Errorf("the second partial peer run:\n%s", got)
	}
	// A rerun of one of two rows says once where each comes from.
	rerun := &table{intro: "# esfs benchmark results\n\nProduced by `only create_8t`.\n\n", header: main.header,
		rows: []string{"| create_8t | creates | 4.20 |"}}
	got = compose(got, rerun, nil, true)
	for _, want := range []string{"Rows create_1t: produced by `only create`.", "Rows create_8t: produced by `only create_8t`.", "| create_8t | creates | 4.20 |"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("after a rerun of create_8t, %q is there %d times:\n%s", want, strings.Count(got, want), got)
		}
	}
	if strings.Contains(got, "create_1t, create_8t") {
		t.Errorf("after a rerun of create_8t, the first run still claims it:\n%s", got)
	}
}
