//! A throwaway PostgreSQL cluster for `tributary demo` and the test suite. (Being written.)
