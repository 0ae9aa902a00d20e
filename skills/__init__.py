"""The capabilities behind the tools in commands/; each subpackage has a SKILL.md for users'
agents (tools, arguments, results) and contributor notes in docs/skills/."""
