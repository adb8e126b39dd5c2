"""The entries family: reading (`read`), writing over the API (`write`), revisions and diffs
(`history`) and the wiki editor (`editor`). `page_routers` lists the editor's pages before the
entry page, so that `/entries/new` is not taken for an entry called "new"."""

from app.web.entries import editor, history, read, write

api_routers = [read.api_router, write.api_router, history.api_router, editor.api_router]
page_routers = [editor.page_router, history.page_router, read.page_router]
