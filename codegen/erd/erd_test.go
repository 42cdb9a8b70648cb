package erd

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestApply(t *testing.T) {
	t.Parallel()
	base := `
-- a comment; with a semicolon
CREATE TABLE parent (
    tenant_id text NOT NULL,
    parent_id text PRIMARY KEY CHECK (parent_id ~ '^p_[a-z]+;$'),
    note      text,
    UNIQUE (tenant_id, parent_id)
);
CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    CREATE TABLE not_a_table (x int);
END $$;
CREATE TABLE child (
    tenant_id text NOT NULL,
    child_id  text NOT NULL,
    parent_id text,
    "offset"  bigint NOT NULL,
    amount    numeric(12, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (child_id),
    FOREIGN KEY (tenant_id, parent_id) REFERENCES parent (tenant_id, parent_id) ON DELETE CASCADE
);
CREATE INDEX child_idx ON child (parent_id);
`
	for _, tc := range []struct {
		name  string
		extra string
		check func(t *testing.T, s *Schema)
		err   string
	}{
		{name: "create", check: func(t *testing.T, s *Schema) {
			if len(s.Tables) != 2 {
				t.Fatalf("%d tables, want parent and child (not the one in the function body)", len(s.Tables))
			}
			c := s.Tables["child"]
			if got := cols(c); got != "tenant_id text!,child_id text!,parent_id text,offset bigint!,amount numeric(12, 6)!" {
				t.Errorf("columns %s", got)
			}
			if strings.Join(c.PK, ",") != "child_id" || len(c.FKs) != 1 || c.FKs[0].Name != "child_tenant_id_parent_id_fkey" {
				t.Errorf("pk %v fks %+v", c.PK, c.FKs)
			}
			if p := s.Tables["parent"]; strings.Join(p.PK, ",") != "parent_id" || len(p.Uniques) != 1 {
				t.Errorf("parent pk %v uniques %v", p.PK, p.Uniques)
			}
		}},
		{name: "add columns and a foreign key", extra: `ALTER TABLE child
    ADD COLUMN url text NOT NULL DEFAULT '',
    ADD COLUMN other_id text REFERENCES parent (parent_id),
    ADD CHECK (url <> 'x, y'),
    ADD CONSTRAINT named_fk FOREIGN KEY (tenant_id, other_id) REFERENCES parent (tenant_id, parent_id);`,
			check: func(t *testing.T, s *Schema) {
				c := s.Tables["child"]
				if !strings.HasSuffix(cols(c), ",url text!,other_id text") {
					t.Errorf("columns %s", cols(c))
				}
				var names []string
				for _, fk := range c.FKs {
					names = append(names, fk.Name)
				}
				if strings.Join(names, ",") != "child_tenant_id_parent_id_fkey,child_other_id_fkey,named_fk" {
					t.Errorf("foreign keys %v", names)
				}
			}},
		{name: "drop a foreign key by its default name", extra: `ALTER TABLE child DROP CONSTRAINT child_tenant_id_parent_id_fkey;`,
			check: func(t *testing.T, s *Schema) {
				if n := len(s.Tables["child"].FKs); n != 0 {
					t.Errorf("%d foreign keys left", n)
				}
			}},
		{name: "replace the primary key", extra: `ALTER TABLE child DROP CONSTRAINT child_pkey; ALTER TABLE child ADD PRIMARY KEY ("offset");`,
			check: func(t *testing.T, s *Schema) {
				if pk := strings.Join(s.Tables["child"].PK, ","); pk != "offset" {
					t.Errorf("pk %s", pk)
				}
			}},
		{name: "not null later", extra: `ALTER TABLE child ALTER COLUMN parent_id SET NOT NULL, ALTER COLUMN amount SET DEFAULT 1;`,
			check: func(t *testing.T, s *Schema) {
				if !s.Tables["child"].Columns[2].NotNull {
					t.Error("parent_id still nullable")
				}
			}},
		{name: "drop a column with its foreign key", extra: `ALTER TABLE child DROP COLUMN parent_id;`,
			check: func(t *testing.T, s *Schema) {
				c := s.Tables["child"]
				if strings.Contains(cols(c), "parent_id") || len(c.FKs) != 0 {
					t.Errorf("columns %s, fks %d", cols(c), len(c.FKs))
				}
			}},
		{name: "rename a column and a table", extra: `ALTER TABLE parent RENAME COLUMN parent_id TO id; ALTER TABLE parent RENAME TO mother;`,
			check: func(t *testing.T, s *Schema) {
				fk := s.Tables["child"].FKs[0]
				if s.Tables["mother"] == nil || fk.RefTable != "mother" || strings.Join(fk.RefColumns, ",") != "tenant_id,id" {
					t.Errorf("fk %+v", fk)
				}
			}},
		{name: "drop a table", extra: `DROP TABLE IF EXISTS child CASCADE;`,
			check: func(t *testing.T, s *Schema) {
				if s.Tables["child"] != nil {
					t.Error("child still there")
				}
			}},
		{name: "unknown alter action", extra: `ALTER TABLE child SET UNLOGGED;`, err: "unknown ALTER TABLE action"},
		{name: "alter of a missing table", extra: `ALTER TABLE nothing ADD COLUMN x text;`, err: "no table nothing"},
		{name: "table twice", extra: `CREATE TABLE child (x text);`, err: "table child exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Schema{Tables: map[string]*Table{}}
			err := s.Apply(base + tc.extra)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	s, err := FromFS(fstest.MapFS{
		"m/0001_a.sql": {Data: []byte(`CREATE TABLE tenant_account (tenant_id text PRIMARY KEY);
CREATE TABLE agent_task (tenant_id text NOT NULL REFERENCES tenant_account (tenant_id), task_id text PRIMARY KEY, amount numeric(12,6));`)},
		"m/0002_b.sql": {Data: []byte(`CREATE TABLE task_model_policy (task_id text PRIMARY KEY REFERENCES agent_task (task_id), note text);`)},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	md := string(s.Markdown())
	for _, want := range []string{
		"(`0001_a.sql` … `0002_b.sql`, 2 files)",
		"```mermaid\nerDiagram\n",
		"    agent_task {\n        text tenant_id FK\n        text task_id PK\n        numeric amount \"nullable\"\n    }\n",
		`    tenant_account ||--o{ agent_task : "tenant_id"`,
		`    agent_task ||--o| task_model_policy : "task_id"`,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestMigrations replays the real migrations: every table they create is drawn, with every
// foreign key, and the tables the brief names are there.
func TestMigrations(t *testing.T) {
	t.Parallel()
	s, err := FromFS(os.DirFS("../.."), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../migrations/0001_foundation.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^CREATE TABLE (\w+)`).FindAllStringSubmatch(string(raw), -1) {
		if s.Tables[m[1]] == nil {
			t.Errorf("table %s missing", m[1])
		}
	}
	md := string(s.Markdown())
	for _, tbl := range s.Tables {
		for _, fk := range tbl.FKs {
			if s.Tables[fk.RefTable] == nil {
				t.Errorf("%s references a table the diagram lacks: %s", tbl.Name, fk.RefTable)
			}
			if !strings.Contains(md, fk.RefTable+" ") || !strings.Contains(md, " "+tbl.Name+` : "`+strings.Join(fk.Columns, ", ")+`"`) {
				t.Errorf("relationship %s → %s (%v) not drawn", tbl.Name, fk.RefTable, fk.Columns)
			}
		}
	}
	// 0004 dropped task_command's foreign key to runtime_node.
	for _, fk := range s.Tables["task_command"].FKs {
		if fk.RefTable == "runtime_node" {
			t.Error("task_command still references runtime_node")
		}
	}
}

func cols(tbl *Table) string {
	var out []string
	for _, c := range tbl.Columns {
		s := c.Name + " " + c.Type
		if c.NotNull {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}
