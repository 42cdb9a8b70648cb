// Package erd turns the SQL migrations (migrations/*.sql) into docs/erd.md, a Mermaid erDiagram
// of the schema they build: every table with its columns (PK, FK and UK marked) and one
// relationship per foreign key. It replays the statements that shape tables — CREATE TABLE,
// ALTER TABLE (columns and constraints added, dropped or renamed), ALTER TABLE … RENAME TO and
// DROP TABLE — and ignores the rest (indexes, functions, triggers, data). An ALTER TABLE action
// it does not know fails the generation, so the diagram never silently drifts from the schema.
// It reads files only: no database is needed.
package erd

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Schema is the set of tables the migrations leave.
type Schema struct {
	Tables map[string]*Table
	// Migrations are the file names read, in the order they were applied.
	Migrations []string
}

// Table is one table.
type Table struct {
	Name    string
	Columns []*Column
	PK      []string
	Uniques [][]string
	FKs     []*ForeignKey
}

// Column is one column of a table.
type Column struct {
	Name    string
	Type    string
	NotNull bool
}

// ForeignKey is one FOREIGN KEY constraint (or a column's REFERENCES).
type ForeignKey struct {
	Name       string // the constraint's name: given, or PostgreSQL's default (<table>_<cols>_fkey)
	Columns    []string
	RefTable   string
	RefColumns []string // empty: the referenced table's primary key
}

// FromFS replays every dir/*.sql of fsys in name order.
func FromFS(fsys fs.FS, dir string) (*Schema, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	s := &Schema{Tables: map[string]*Table{}}
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		if err := s.Apply(string(raw)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.Migrations = append(s.Migrations, path.Base(name))
	}
	return s, nil
}

var (
	reCreate     = regexp.MustCompile(`(?is)^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\S+)\s*\((.*)\)\s*$`)
	reAlter      = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(\S+)\s+(.*)$`)
	reDrop       = regexp.MustCompile(`(?is)^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(.*?)(?:\s+(?:CASCADE|RESTRICT))?\s*$`)
	reRenameTo   = regexp.MustCompile(`(?is)^RENAME\s+TO\s+(\S+)$`)
	reRenameCol  = regexp.MustCompile(`(?is)^RENAME\s+(?:COLUMN\s+)?(\S+)\s+TO\s+(\S+)$`)
	reAddColumn  = regexp.MustCompile(`(?is)^ADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?(.*)$`)
	reDropColumn = regexp.MustCompile(`(?is)^DROP\s+COLUMN\s+(?:IF\s+EXISTS\s+)?(\S+)(?:\s+(?:CASCADE|RESTRICT))?$`)
	reDropCons   = regexp.MustCompile(`(?is)^DROP\s+CONSTRAINT\s+(?:IF\s+EXISTS\s+)?(\S+)(?:\s+(?:CASCADE|RESTRICT))?$`)
	reAddCons    = regexp.MustCompile(`(?is)^ADD\s+(.*)$`)
	reAlterCol   = regexp.MustCompile(`(?is)^ALTER\s+(?:COLUMN\s+)?(\S+)\s+(.*)$`)
	reNotNull    = regexp.MustCompile(`(?is)^(SET|DROP)\s+NOT\s+NULL$`)
	reRefs       = regexp.MustCompile(`(?is)\bREFERENCES\s+(\S+?)\s*(?:\(([^)]*)\))?(?:\s|$)`)
	reFK         = regexp.MustCompile(`(?is)^FOREIGN\s+KEY\s*\(([^)]*)\)\s*REFERENCES\s+(\S+?)\s*(?:\(([^)]*)\))?(?:\s|$)`)
	rePK         = regexp.MustCompile(`(?is)^PRIMARY\s+KEY\s*\(([^)]*)\)`)
	reUnique     = regexp.MustCompile(`(?is)^UNIQUE\s*(?:NULLS\s+(?:NOT\s+)?DISTINCT\s*)?\(([^)]*)\)`)
	reConsName   = regexp.MustCompile(`(?is)^CONSTRAINT\s+(\S+)\s+(.*)$`)
	reColKeyword = regexp.MustCompile(`(?is)\s(NOT\s+NULL|NULL|DEFAULT|REFERENCES|PRIMARY\s+KEY|UNIQUE|CHECK|CONSTRAINT|GENERATED|COLLATE)\b`)
)

// Apply replays the statements of one migration.
func (s *Schema) Apply(sql string) error {
	for _, stmt := range statements(sql) {
		if err := s.statement(stmt); err != nil {
			return fmt.Errorf("%s: %w", firstLine(stmt), err)
		}
	}
	return nil
}

func (s *Schema) statement(stmt string) error {
	switch {
	case reCreate.MatchString(stmt):
		m := reCreate.FindStringSubmatch(stmt)
		name := ident(m[1])
		if s.Tables[name] != nil {
			return fmt.Errorf("table %s exists", name)
		}
		t := &Table{Name: name}
		s.Tables[name] = t
		for _, item := range splitTop(m[2]) {
			if err := t.item(item); err != nil {
				return err
			}
		}
	case reAlter.MatchString(stmt):
		m := reAlter.FindStringSubmatch(stmt)
		name := ident(m[1])
		t := s.Tables[name]
		if t == nil {
			return fmt.Errorf("no table %s", name)
		}
		if r := reRenameTo.FindStringSubmatch(strings.TrimSpace(m[2])); r != nil {
			newName := ident(r[1])
			delete(s.Tables, name)
			t.Name = newName
			s.Tables[newName] = t
			for _, o := range s.Tables {
				for _, fk := range o.FKs {
					if fk.RefTable == name {
						fk.RefTable = newName
					}
				}
			}
			return nil
		}
		for _, action := range splitTop(m[2]) {
			if err := s.alter(t, action); err != nil {
				return err
			}
		}
	case reDrop.MatchString(stmt):
		for _, n := range strings.Split(reDrop.FindStringSubmatch(stmt)[1], ",") {
			delete(s.Tables, ident(n))
		}
	}
	return nil
}

func (s *Schema) alter(t *Table, action string) error {
	switch {
	case reAddColumn.MatchString(action):
		return t.column(reAddColumn.FindStringSubmatch(action)[1])
	case reDropColumn.MatchString(action):
		col := ident(reDropColumn.FindStringSubmatch(action)[1])
		i := t.index(col)
		if i < 0 {
			return fmt.Errorf("no column %s.%s", t.Name, col)
		}
		t.Columns = append(t.Columns[:i], t.Columns[i+1:]...)
		// PostgreSQL drops the constraints that use the column with it.
		t.PK = without(t.PK, col)
		var us [][]string
		for _, u := range t.Uniques {
			if !contains(u, col) {
				us = append(us, u)
			}
		}
		t.Uniques = us
		var fks []*ForeignKey
		for _, fk := range t.FKs {
			if !contains(fk.Columns, col) {
				fks = append(fks, fk)
			}
		}
		t.FKs = fks
	case reRenameCol.MatchString(action):
		m := reRenameCol.FindStringSubmatch(action)
		from, to := ident(m[1]), ident(m[2])
		i := t.index(from)
		if i < 0 {
			return fmt.Errorf("no column %s.%s", t.Name, from)
		}
		t.Columns[i].Name = to
		rename := func(cols []string) {
			for j := range cols {
				if cols[j] == from {
					cols[j] = to
				}
			}
		}
		rename(t.PK)
		for _, u := range t.Uniques {
			rename(u)
		}
		for _, fk := range t.FKs {
			rename(fk.Columns)
		}
		for _, o := range s.Tables {
			for _, fk := range o.FKs {
				if fk.RefTable == t.Name {
					rename(fk.RefColumns)
				}
			}
		}
	case reDropCons.MatchString(action):
		name := ident(reDropCons.FindStringSubmatch(action)[1])
		if name == t.Name+"_pkey" {
			t.PK = nil
			return nil
		}
		for i, fk := range t.FKs {
			if fk.Name == name {
				t.FKs = append(t.FKs[:i], t.FKs[i+1:]...)
				return nil
			}
		}
		// CHECK and UNIQUE constraints are dropped by name; only foreign keys and the primary key
		// shape the diagram, and a UNIQUE's default name is kept below.
		for i, u := range t.Uniques {
			if name == t.Name+"_"+strings.Join(u, "_")+"_key" {
				t.Uniques = append(t.Uniques[:i], t.Uniques[i+1:]...)
				return nil
			}
		}
	case reAlterCol.MatchString(action):
		m := reAlterCol.FindStringSubmatch(action)
		col := ident(m[1])
		i := t.index(col)
		if i < 0 {
			return fmt.Errorf("no column %s.%s", t.Name, col)
		}
		if n := reNotNull.FindStringSubmatch(strings.TrimSpace(m[2])); n != nil {
			t.Columns[i].NotNull = strings.EqualFold(n[1], "SET")
		} else if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(m[2])), "TYPE ") || strings.HasPrefix(strings.ToUpper(strings.TrimSpace(m[2])), "SET DATA TYPE ") {
			typ := strings.TrimSpace(m[2])
			typ = regexp.MustCompile(`(?is)^(SET\s+DATA\s+)?TYPE\s+`).ReplaceAllString(typ, "")
			typ = regexp.MustCompile(`(?is)\s+USING\s+.*$`).ReplaceAllString(typ, "")
			t.Columns[i].Type = typ
		}
		// SET/DROP DEFAULT, statistics, storage: nothing the diagram shows.
	case reAddCons.MatchString(action):
		return t.constraint(reAddCons.FindStringSubmatch(action)[1])
	default:
		return fmt.Errorf("unknown ALTER TABLE action %q (teach codegen/erd)", firstLine(action))
	}
	return nil
}

// item is one element of a CREATE TABLE body: a column or a table constraint.
func (t *Table) item(item string) error {
	if isConstraint(item) {
		return t.constraint(item)
	}
	return t.column(item)
}

func isConstraint(item string) bool {
	up := strings.ToUpper(item)
	for _, p := range []string{"CONSTRAINT ", "PRIMARY KEY", "FOREIGN KEY", "UNIQUE", "CHECK", "EXCLUDE"} {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	return false
}

func (t *Table) constraint(def string) error {
	name := ""
	if m := reConsName.FindStringSubmatch(def); m != nil {
		name, def = ident(m[1]), m[2]
	}
	switch {
	case rePK.MatchString(def):
		t.PK = idents(rePK.FindStringSubmatch(def)[1])
	case reUnique.MatchString(def):
		t.Uniques = append(t.Uniques, idents(reUnique.FindStringSubmatch(def)[1]))
	case reFK.MatchString(def):
		m := reFK.FindStringSubmatch(def)
		fk := &ForeignKey{Name: name, Columns: idents(m[1]), RefTable: ident(m[2]), RefColumns: idents(m[3])}
		if fk.Name == "" {
			fk.Name = t.Name + "_" + strings.Join(fk.Columns, "_") + "_fkey"
		}
		t.FKs = append(t.FKs, fk)
	case strings.HasPrefix(strings.ToUpper(def), "CHECK"), strings.HasPrefix(strings.ToUpper(def), "EXCLUDE"):
		// Not drawn.
	default:
		return fmt.Errorf("unknown constraint %q (teach codegen/erd)", firstLine(def))
	}
	return nil
}

// column parses "name type [constraints…]".
func (t *Table) column(def string) error {
	fields := strings.Fields(def)
	if len(fields) < 2 {
		return fmt.Errorf("column %q without a type", def)
	}
	name := ident(fields[0])
	if t.index(name) >= 0 {
		return fmt.Errorf("column %s.%s exists", t.Name, name)
	}
	rest := strings.TrimSpace(def[len(fields[0]):])
	typ, constraints := rest, ""
	if loc := reColKeyword.FindStringIndex(" " + rest); loc != nil {
		typ, constraints = strings.TrimSpace(rest[:max(loc[0]-1, 0)]), rest[max(loc[0]-1, 0):]
	}
	c := &Column{Name: name, Type: typ}
	up := strings.ToUpper(constraints)
	c.NotNull = strings.Contains(up, "NOT NULL") || strings.Contains(up, "PRIMARY KEY")
	t.Columns = append(t.Columns, c)
	if strings.Contains(up, "PRIMARY KEY") {
		t.PK = []string{name}
	}
	if regexp.MustCompile(`(?i)\bUNIQUE\b`).MatchString(constraints) {
		t.Uniques = append(t.Uniques, []string{name})
	}
	if m := reRefs.FindStringSubmatch(constraints + " "); m != nil {
		t.FKs = append(t.FKs, &ForeignKey{Name: t.Name + "_" + name + "_fkey", Columns: []string{name},
			RefTable: ident(m[1]), RefColumns: idents(m[2])})
	}
	return nil
}

func (t *Table) index(col string) int {
	for i, c := range t.Columns {
		if c.Name == col {
			return i
		}
	}
	return -1
}

// Markdown renders docs/erd.md.
func (s *Schema) Markdown() []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Code generated by bapgen from migrations/*.sql (codegen/erd). DO NOT EDIT. -->\n\n")
	b.WriteString("# Entity-relationship diagram\n\n")
	fmt.Fprintf(&b, "The schema that `migrations/` builds (`%s` … `%s`, %d files),\n", first(s.Migrations), last(s.Migrations), len(s.Migrations))
	b.WriteString("drawn from the SQL itself by `make generate` (codegen/erd); `scripts/check-generated.sh` (in\n")
	b.WriteString("`make test`) fails when it is stale. Each table\n")
	b.WriteString("lists its columns with their SQL types (`PK` primary key, `FK` foreign key, `UK` unique); each\n")
	b.WriteString("foreign key is one relationship, labelled with its columns (`|o` when they may be NULL). CHECK\n")
	b.WriteString("constraints, triggers (the append-only history) and indexes are in the migrations, not drawn.\n\n")
	b.WriteString("```mermaid\nerDiagram\n")
	names := make([]string, 0, len(s.Tables))
	for n := range s.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := s.Tables[n]
		fmt.Fprintf(&b, "    %s {\n", n)
		for _, c := range t.Columns {
			var keys []string
			if contains(t.PK, c.Name) {
				keys = append(keys, "PK")
			}
			for _, fk := range t.FKs {
				if contains(fk.Columns, c.Name) {
					keys = append(keys, "FK")
					break
				}
			}
			for _, u := range t.Uniques {
				if contains(u, c.Name) && !contains(keys, "UK") {
					keys = append(keys, "UK")
				}
			}
			line := fmt.Sprintf("        %s %s", mermaidType(c.Type), c.Name)
			if len(keys) > 0 {
				line += " " + strings.Join(keys, ", ")
			}
			if !c.NotNull && !contains(t.PK, c.Name) {
				line += ` "nullable"`
			}
			b.WriteString(line + "\n")
		}
		b.WriteString("    }\n")
	}
	for _, n := range names {
		t := s.Tables[n]
		fks := append([]*ForeignKey(nil), t.FKs...)
		sort.SliceStable(fks, func(i, j int) bool {
			return fks[i].RefTable+strings.Join(fks[i].Columns, ",") < fks[j].RefTable+strings.Join(fks[j].Columns, ",")
		})
		for _, fk := range fks {
			parent := "||"
			for _, col := range fk.Columns {
				if i := t.index(col); i >= 0 && !t.Columns[i].NotNull {
					parent = "|o"
				}
			}
			child := "o{"
			if equal(fk.Columns, t.PK) {
				child = "o|"
			}
			for _, u := range t.Uniques {
				if equal(fk.Columns, u) {
					child = "o|"
				}
			}
			fmt.Fprintf(&b, "    %s %s--%s %s : \"%s\"\n", fk.RefTable, parent, child, n, strings.Join(fk.Columns, ", "))
		}
	}
	b.WriteString("```\n")
	return b.Bytes()
}

// mermaidType makes a SQL type one Mermaid word: numeric(12,6) → numeric, text[] stays.
func mermaidType(t string) string {
	t = regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(strings.ToLower(t), "")
	t = strings.Join(strings.Fields(t), "_")
	return t
}

// statements splits SQL into statements at semicolons outside quotes, dollar quotes and
// comments, with comments removed and whitespace collapsed.
func statements(sql string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			cur.WriteByte(' ')
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				i = len(sql)
			} else {
				i += end + 3
			}
			cur.WriteByte(' ')
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(sql) {
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			cur.WriteString(sql[i:min(j+1, len(sql))])
			i = j
		case c == '$':
			if m := regexp.MustCompile(`^\$[A-Za-z_]*\$`).FindString(sql[i:]); m != "" {
				end := strings.Index(sql[i+len(m):], m)
				if end < 0 {
					end = len(sql) - i - len(m)
				}
				cur.WriteString(" $body$ ")
				i += len(m) + end + len(m) - 1
			} else {
				cur.WriteByte(c)
			}
		case c == ';':
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}

// splitTop splits s at commas outside parentheses and quotes, trimming each part.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if p := strings.TrimSpace(s[start:]); p != "" {
		out = append(out, p)
	}
	return out
}

func ident(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`) && len(s) >= 2 {
		return s[1 : len(s)-1]
	}
	if i := strings.LastIndex(s, "."); i >= 0 { // public.table
		s = s[i+1:]
	}
	return strings.ToLower(s)
}

func idents(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, ident(p))
		}
	}
	return out
}

func firstLine(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func without(list []string, s string) []string {
	if contains(list, s) {
		return nil // a primary key that loses a column is dropped
	}
	return list
}

func equal(a, b []string) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	x, y := append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	return strings.Join(x, ",") == strings.Join(y, ",")
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
