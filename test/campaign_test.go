package test

// The fault campaign (test/campaign) in the suite: a few fixed seeds,
// about a minute each. ESFS_CAMPAIGN_SEED picks one seed,
// ESFS_CAMPAIGN_DURATION the time per seed, ESFS_CAMPAIGN_MOUNTS the
// number of mounts, ESFS_CAMPAIGN_FAULTS=0 turns the faults off,
// ESFS_CAMPAIGN_EXCLUDE (comma-separated) names finding classes of known
// open bugs, ESFS_CAMPAIGN_DEBUG=1 has the mounts log every FUSE request,
// ESFS_CAMPAIGN_CORES=1 runs the mounts as cores in the test process
// (TestCampaignCores does, on seeds of its own), ESFS_CAMPAIGN_BIG_WRITES=1
// lets kernel mounts write past their 32 MiB dirty limit (seconds a
// write: not in the suite); test/campaign.sh runs it on fresh seeds for
// as long as asked.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/campaign"
)

// campaignSeeds are the suite's seeds: each finding's seed joins them
// once it is fixed. They share campaignTime, each given at least 20 s
// (a seed's faults need that long to meet its operations): with 27
// seeds, about 9 minutes of the suite.
var campaignSeeds = []int64{1, 3, 130822589, 215993735, 625586132, 712164965, 78857218, 205007824, 187512168, 717600572, 278378662, 221705407, 189815862, 140690161, 868956585, 450358988, 418038309, 610759803, 371384013, 387179081, 269891804, 814943796, 956352814, 753176012, 51272645, 687873238, 729683240}

// campaignOpenSeeds found, in the suite's own run, findings still open
// (seed 2: an unknown outcome of a close after a freeze, perhaps a flush
// landed in part, which the checker now accepts (mixedFlush), not yet
// seen again; seed 720786204: its fstat finding fixed, then a final tree
// where one mount saw a file at "a" where the model has a directory;
// neither seen in reruns since): they run only with ESFS_TEST_OPEN_FINDINGS=1,
// as the tests of open findings do, and join campaignSeeds once fixed.
var campaignOpenSeeds = []int64{2, 720786204}

const campaignTime = 140 * time.Second

// campaignExcluded: finding classes of known open bugs, excluded in the
// suite while the bug is open (see test/campaign_findings_test.go).
var campaignExcluded = []string{
	"unlinked-elsewhere", // open: a file unlinked on another mount is gone for this one's descriptors (docs/consistency.md)
}

func TestCampaign(t *testing.T) {
	seeds := campaignSeeds
	if os.Getenv("ESFS_TEST_OPEN_FINDINGS") == "1" {
		seeds = append(append([]int64{}, seeds...), campaignOpenSeeds...)
	}
	runCampaign(t, seeds, campaignTime, os.Getenv("ESFS_CAMPAIGN_CORES") == "1")
}

// campaignCoreSeeds are TestCampaignCores's seeds, which share
// campaignCoreTime: mounts as cores in the test process, request faults
// only, more operations a minute than kernel mounts make.
var campaignCoreSeeds = []int64{11, 12, 13}

const campaignCoreTime = 90 * time.Second

// TestCampaignCores is the campaign through cores (test/campaign/core.go)
// instead of kernel mounts: what the cores hold in memory, its flushes,
// recalls, locks and lost answers, with no kernel in the way.
func TestCampaignCores(t *testing.T) {
	runCampaign(t, campaignCoreSeeds, campaignCoreTime, true)
}

// runCampaign runs seeds for total (each at least 20 s) unless the
// environment says otherwise (see the top of this file).
func runCampaign(t *testing.T, seeds []int64, total time.Duration, cores bool) {
	if s := os.Getenv("ESFS_CAMPAIGN_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("ESFS_CAMPAIGN_SEED: %v", err)
		}
		seeds = []int64{n}
	}
	d := max(total/time.Duration(len(seeds)), 20*time.Second)
	if s := os.Getenv("ESFS_CAMPAIGN_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("ESFS_CAMPAIGN_DURATION: %v", err)
		}
	}
	exclude := map[string]bool{}
	for _, c := range campaignExcluded {
		exclude[c] = true
	}
	if s := os.Getenv("ESFS_CAMPAIGN_EXCLUDE"); s != "" {
		for _, c := range strings.Split(s, ",") {
			exclude[c] = true
		}
	}
	cfg := campaign.Config{Duration: d, Faults: os.Getenv("ESFS_CAMPAIGN_FAULTS") != "0", Exclude: exclude,
		Mounts: envInt(t, "ESFS_CAMPAIGN_MOUNTS", 3), Debug: os.Getenv("ESFS_CAMPAIGN_DEBUG") == "1", Cores: cores,
		BigWrites: os.Getenv("ESFS_CAMPAIGN_BIG_WRITES") == "1"}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cfg := cfg
			cfg.Seed = seed
			res := campaign.Run(t, cfg)
			t.Logf("CAMPAIGN seed %d: %s", seed, campaign.Totals(res))
			t.Logf("CAMPAIGN-TOTALS %s", campaign.TotalsLine(res))
			if res.Excluded != nil {
				t.Logf("CAMPAIGN seed %d ended by a finding of an excluded class, %s: %s", seed, res.Excluded.Class, res.Excluded.Text)
			}
			for _, f := range res.Findings {
				t.Errorf("CAMPAIGN FINDING %s (seed %d): %s\nreplay: %s", f.Class, seed, f.Text, campaign.Replay(cfg))
			}
		})
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
