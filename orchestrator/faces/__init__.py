"""What a person uses: the CLI (cli/), the review page (web/), MCP, the demo,
import, doctor, previews, and the read-only reports they show."""
