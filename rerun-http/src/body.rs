//! Bodies: requests read whole (up to `max_body`) to be fingerprinted, responses read whole to
//! be recorded, and the body types the layer hands on.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, LengthLimitError};
use pin_project_lite::pin_project;

/// The error type of the layer's bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pin_project! {
    /// The request body the inner service receives: the buffered bytes of a request the layer
    /// handled, or the original body of one it passed through.
    pub struct RequestBody<B> {
        #[pin]
        inner: RequestInner<B>,
    }
}

pin_project! {
    #[project = RequestBodyProj]
    enum RequestInner<B> {
        Buffered { data: Option<Bytes> },
        Streaming { #[pin] body: B },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn buffered(data: Bytes) -> Self {
        RequestBody {
            inner: RequestInner::Buffered {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
    pub(crate) fn streaming(body: B) -> Self {
        RequestBody {
            inner: RequestInner::Streaming { body },
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().inner.project() {
            RequestBodyProj::Buffered { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(d))))
            }
            RequestBodyProj::Streaming { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            RequestInner::Buffered { data } => data.is_none(),
            RequestInner::Streaming { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            RequestInner::Buffered { data } => exact(data),
            RequestInner::Streaming { body } => body.size_hint(),
        }
    }
}

pin_project! {
    /// The response body the layer returns: recorded bytes and trailers (fresh or replayed) or
    /// a problem, the inner service's body passed through (5xx, event streams), or the inner
    /// body resumed after the frames already read from it (a response over `max_body`).
    pub struct ResponseBody<B> {
        #[pin]
        inner: ResponseInner<B>,
    }
}

pin_project! {
    #[project = ResponseBodyProj]
    enum ResponseInner<B> {
        // Bytes held whole, then the trailers, if any.
        Buffered { data: Option<Bytes>, trailers: Option<HeaderMap> },
        // The inner body, untouched.
        Streaming { #[pin] body: B },
        // Frames read ahead, then the rest of the inner body.
        Resumed { read: VecDeque<Frame<Bytes>>, rest: Pin<Box<B>> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn buffered(data: Bytes) -> Self {
        ResponseBody::whole(data, None)
    }
    /// Bytes, then a trailers frame when there are trailers.
    pub(crate) fn whole(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        ResponseBody {
            inner: ResponseInner::Buffered {
                data: (!data.is_empty()).then_some(data),
                trailers,
            },
        }
    }
    pub(crate) fn streaming(body: B) -> Self {
        ResponseBody {
            inner: ResponseInner::Streaming { body },
        }
    }
    fn resumed(read: VecDeque<Frame<Bytes>>, rest: Pin<Box<B>>) -> Self {
        ResponseBody {
            inner: ResponseInner::Resumed { read, rest },
        }
    }
}

impl<B> From<Vec<u8>> for ResponseBody<B> {
    fn from(data: Vec<u8>) -> Self {
        ResponseBody::buffered(Bytes::from(data))
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().inner.project() {
            ResponseBodyProj::Buffered { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
            ResponseBodyProj::Streaming { body } => body.poll_frame(cx).map_err(Into::into),
            ResponseBodyProj::Resumed { read, rest } => match read.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => rest.as_mut().poll_frame(cx).map_err(Into::into),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            ResponseInner::Buffered { data, trailers } => data.is_none() && trailers.is_none(),
            ResponseInner::Streaming { body } => body.is_end_stream(),
            ResponseInner::Resumed { read, rest } => read.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            ResponseInner::Buffered {
                data,
                trailers: None,
            } => exact(data),
            // Trailers need a framing that can carry them (chunked, in HTTP/1.1), which a
            // server picks only for a body whose length it is not told exactly.
            ResponseInner::Buffered { data, .. } => {
                let mut hint = SizeHint::new();
                hint.set_lower(exact(data).lower());
                hint
            }
            ResponseInner::Streaming { body } => body.size_hint(),
            ResponseInner::Resumed { read, rest } => {
                let ahead: u64 = read
                    .iter()
                    .filter_map(|f| f.data_ref())
                    .map(|d| d.len() as u64)
                    .sum();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(ahead));
                match rest.upper() {
                    // Trailers read ahead: no exact length, as for a buffered body.
                    Some(_) if read.iter().any(Frame::is_trailers) => {}
                    Some(upper) => hint.set_upper(upper.saturating_add(ahead)),
                    None => {}
                }
                hint
            }
        }
    }
}

fn exact(data: &Option<Bytes>) -> SizeHint {
    SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
}

/// Why a request body could not be read whole.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// It is larger than `max_body`.
    TooLarge,
    /// It is larger than the limit of a layer around this one (`http_body_util::Limited`, as
    /// `tower_http`'s `RequestBodyLimitLayer` sets).
    OverOuterLimit,
    /// The client's body failed (a broken connection, bad chunked encoding).
    Failed(BoxError),
}

/// Reads a request body whole, refusing one larger than `max` bytes (by its `Content-Length`
/// before reading anything, else as soon as it passes the limit). Trailers are dropped.
pub(crate) async fn read_request<B>(
    headers: &HeaderMap,
    body: B,
    max: usize,
) -> Result<Bytes, ReadError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) || body.size_hint().lower() > max as u64 {
        return Err(ReadError::TooLarge);
    }
    let mut body = std::pin::pin!(body);
    let mut buf = BytesMut::new();
    let mut first: Option<Bytes> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| failed(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = buf.len() + first.as_ref().map_or(0, Bytes::len) + data.len();
        if total > max {
            return Err(ReadError::TooLarge);
        }
        // A body of one frame (the common case) is kept without a copy.
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            None => buf.extend_from_slice(&data),
            Some(f) => {
                buf.extend_from_slice(&f);
                buf.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// The error of a request body that failed: over a limit set around the layer when its chain
/// of sources holds a `LengthLimitError` (a framework may wrap it in an error of its own).
fn failed(e: BoxError) -> ReadError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
    while let Some(error) = cause {
        if error.is::<LengthLimitError>() {
            return ReadError::OverOuterLimit;
        }
        cause = error.source();
    }
    ReadError::Failed(e)
}

/// What reading a response body whole gave.
pub(crate) enum Captured<B> {
    /// The whole body and its trailers (as gRPC sends its status), within the limit.
    Whole(Bytes, Option<HeaderMap>),
    /// Too large, or frames after the trailers: what was read, and the rest, to pass on
    /// unrecorded.
    Partial(ResponseBody<B>),
    /// The body failed.
    Failed(BoxError),
}

/// Reads a response body whole, with its trailers, if it fits in `max` bytes (the trailers'
/// names and values counted too).
pub(crate) async fn read_response<B>(body: B, max: usize) -> Captured<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len = 0usize;
    let mut ended = false;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return Captured::Failed(e.into()),
        };
        // Nothing may follow the trailers, and a frame of another kind is not recorded.
        let over = ended
            || match (frame.data_ref(), frame.trailers_ref()) {
                (Some(data), _) => {
                    len = len.saturating_add(data.len());
                    len > max
                }
                (None, Some(trailers)) => {
                    ended = true;
                    len = trailers.iter().fold(len, |len, (name, value)| {
                        len.saturating_add(name.as_str().len() + value.len())
                    });
                    len > max
                }
                (None, None) => true,
            };
        read.push_back(frame);
        if over {
            return Captured::Partial(ResponseBody::resumed(read, body));
        }
    }
    let trailers = match read.back().is_some_and(Frame::is_trailers) {
        true => read.pop_back().and_then(|t| t.into_trailers().ok()),
        false => None,
    };
    if read.len() == 1 {
        if let Some(Ok(data)) = read.pop_front().map(Frame::into_data) {
            return Captured::Whole(data, trailers);
        }
    }
    let mut buf = BytesMut::with_capacity(len);
    for frame in read {
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    Captured::Whole(buf.freeze(), trailers)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Buffered = ResponseBody<http_body_util::Empty<Bytes>>;

    fn trailers() -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("abc"));
        trailers
    }

    #[test]
    fn a_body_with_trailers_has_no_exact_length() {
        let hint = Buffered::whole(Bytes::from_static(b"body"), None).size_hint();
        assert_eq!(hint.exact(), Some(4));
        let hint = Buffered::whole(Bytes::from_static(b"body"), Some(trailers())).size_hint();
        assert_eq!((hint.lower(), hint.upper()), (4, None));
        let hint = Buffered::whole(Bytes::new(), Some(trailers())).size_hint();
        assert_eq!((hint.lower(), hint.upper()), (0, None));
        // Frames read ahead of an ended body, its trailers among them.
        let read = VecDeque::from([
            Frame::data(Bytes::from_static(b"body")),
            Frame::trailers(trailers()),
        ]);
        let rest = Box::pin(http_body_util::Empty::<Bytes>::new());
        let hint = ResponseBody::resumed(read, rest).size_hint();
        assert_eq!((hint.lower(), hint.upper()), (4, None));
        let read = VecDeque::from([Frame::data(Bytes::from_static(b"body"))]);
        let rest = Box::pin(http_body_util::Empty::<Bytes>::new());
        assert_eq!(
            ResponseBody::resumed(read, rest).size_hint().exact(),
            Some(4)
        );
    }

    /// An error that wraps another, as a framework's body error does.
    #[derive(Debug)]
    struct Wrapped(BoxError);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the body failed")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[tokio::test]
    async fn a_body_over_a_limit_set_around_the_layer_is_too_large_not_failed() {
        let limited = || {
            http_body_util::Limited::new(
                http_body_util::Full::new(Bytes::from_static(b"0123456789")),
                4,
            )
        };
        let headers = HeaderMap::new();
        let read = read_request(&headers, limited(), 1024).await;
        assert!(matches!(read, Err(ReadError::OverOuterLimit)), "{read:?}");
        // Wrapped twice, as a framework's body error may be.
        let wrapped = limited().map_err(|e| Wrapped(Wrapped(e).into()));
        let read = read_request(&headers, wrapped, 1024).await;
        assert!(matches!(read, Err(ReadError::OverOuterLimit)), "{read:?}");
        let broken =
            http_body_util::StreamBody::new(futures_util::stream::iter([Err::<Frame<Bytes>, _>(
                Wrapped(std::io::Error::other("reset").into()),
            )]));
        let read = read_request(&headers, broken, 1024).await;
        assert!(matches!(read, Err(ReadError::Failed(_))), "{read:?}");
    }
}
