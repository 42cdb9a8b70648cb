package orchestrator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/originweave/bap/server/internal/app"
)

// classRank is the position of a data classification in app.DataClassifications, or -1.
func classRank(c string) int {
	return slices.Index(app.DataClassifications, c)
}

// Satisfies reports whether a model's metadata satisfies a task's model policy, and if not, why
// (a short text without any task data). Unknown metadata never satisfies a clause that constrains
// it (fail closed):
//   - provider in AllowedProviders when that is not empty (case-insensitive);
//   - region in AllowedRegions when that is not empty (case-insensitive);
//   - RetentionDays known and at most MaxRetentionDays when that is set;
//   - MaxClassification known and at least DataClassification ("" counts as "restricted"; an
//     unknown task classification is satisfied by no model).
func Satisfies(m app.ModelInfo, pol app.ModelPolicy) (bool, string) {
	if len(pol.AllowedProviders) > 0 && !containsFold(pol.AllowedProviders, m.Provider) {
		if m.Provider == "" {
			return false, "provider unknown"
		}
		return false, fmt.Sprintf("provider %q not allowed", m.Provider)
	}
	if len(pol.AllowedRegions) > 0 && !containsFold(pol.AllowedRegions, m.Region) {
		if m.Region == "" {
			return false, "region unknown"
		}
		return false, fmt.Sprintf("region %q not allowed", m.Region)
	}
	if pol.MaxRetentionDays != nil {
		switch {
		case m.RetentionDays < 0:
			return false, "retention unknown"
		case m.RetentionDays > *pol.MaxRetentionDays:
			return false, fmt.Sprintf("retention %d days exceeds %d", m.RetentionDays, *pol.MaxRetentionDays)
		}
	}
	need := pol.DataClassification
	if need == "" {
		need = "restricted"
	}
	want := classRank(need)
	if want < 0 {
		return false, fmt.Sprintf("task data classification %q unknown", need)
	}
	have := classRank(m.MaxClassification)
	if have < 0 {
		return false, "highest data classification unknown"
	}
	if have < want {
		return false, fmt.Sprintf("may see %s data at most, the task's is %s", m.MaxClassification, need)
	}
	return true, ""
}

func containsFold(list []string, v string) bool {
	if v == "" {
		return false
	}
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(strings.TrimSpace(x), v) })
}
