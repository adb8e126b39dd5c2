"""The accounts family: the API (`api`) and the pages (`pages`) for logins, users and tokens."""

from app.web.accounts import api, pages

api_routers = [api.api_router]
page_routers = [pages.page_router]
