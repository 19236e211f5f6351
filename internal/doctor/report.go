package doctor

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Report prints the findings as one screen: a line per check, then what to set, and returns how many are
// missing.
func Report(w io.Writer, server string, findings []Finding) (missing int, err error) {
	if _, err := fmt.Fprintf(w, "Airlock doctor: %s\n\n", server); err != nil {
		return 0, err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var fixes []Finding
	for _, f := range findings {
		if f.Status == Missing {
			missing++
		}
		if f.Fix != "" {
			fixes = append(fixes, f)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Check, f.Status, f.Detail)
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	if len(fixes) > 0 {
		fmt.Fprintln(w, "\nTo set:")
		for _, f := range fixes {
			fmt.Fprintf(w, "  %s: %s\n", f.Check, f.Fix)
		}
	}
	if missing > 0 {
		_, err = fmt.Fprintf(w, "\n%d missing: Airlock will not work, or not safely, until they are fixed.\n", missing)
		return missing, err
	}
	_, err = fmt.Fprintln(w, "\nNothing missing.")
	return 0, err
}
