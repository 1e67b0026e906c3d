"""@engine_work: Textual's @work for a method that talks to the engine; an engine error is shown to the user
(a notification, or the engine-error screen when the engine is gone) instead of ending the app."""

import functools

import httpx
from textual import work
from textual.css.query import NoMatches

from localchat.app.client.engine_client import EngineError


def engine_work(**options):
    def decorate(method):
        @functools.wraps(method)
        async def reporting(self, *args, **kwargs):
            try:
                return await method(self, *args, **kwargs)
            except (httpx.HTTPError, EngineError) as error:
                self.app.report_engine_error(error)
            except NoMatches:
                if self.is_attached and self.app.is_running:
                    raise
                # the screen was taken down (or the app is quitting) while the engine answered: nothing to show

        return work(reporting, **options)

    return decorate
